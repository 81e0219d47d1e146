"""The coordinator's status page, checked from outside (tests/net/test_status_http.sh).
  status_check.py abuse PORT HOLD LOG: bad requests to 127.0.0.1:PORT: malformed HTTP,
      200 connections held open until the coordinator committed twice more (LOG, its
      log, gains two "committed" lines) or for at most HOLD seconds (a failure), a 10 KB URL, other methods and an unknown
      path must each get a 4xx (or a closed connection for the malformed ones), never a
      2xx; afterwards /status.json is served again. One line per check; exit 1
      on any failure.
  status_check.py numbers STATUS_JSON METRICS_TXT RUN...: the page's numbers against the
      islands' own summary.json (RUN/summary.json, island k = RUN k), and /metrics parsed
      with prometheus_client's parser (this python must have it).
  status_check.py dom DOM_HTML K: the page's island table lists islands 0..K-1."""
import json, socket, sys, time, urllib.request
from html.parser import HTMLParser

def raw(port, data, wait=5.0):
    """Sends data, returns the status line ('' when the server closed without one)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    except OSError:
        return ""
    try:
        s.sendall(data)
        got = b""
        while b"\r\n" not in got:
            c = s.recv(4096)
            if not c: break
            got += c
        return got.split(b"\r\n")[0].decode("latin-1")
    except OSError:
        return ""
    finally:
        s.close()

def commits(log):
    return open(log, errors="replace").read().count("committed: revision")

def abuse(port, hold, log):
    bad = 0
    def check(name, line, ok_closed=False):
        nonlocal bad
        code = line.split()[1] if len(line.split()) > 1 and line.startswith("HTTP/") else ""
        good = (code[:1] == "4") or (ok_closed and line == "")
        print(f"{'ok' if good else 'FAIL'}: {name}: {line or 'closed'}")
        bad += not good
    check("malformed request line", raw(port, b"\x16\x03\x01\x00garbage\r\n\r\n"), ok_closed=True)
    check("no HTTP version", raw(port, b"GET\r\n\r\n"), ok_closed=True)
    held = []
    for _ in range(200):  # opened at once (non-blocking), each with a request that never ends
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        held.append(s)
    time.sleep(1)
    sent = 0
    for s in held:
        try:
            s.send(b"GET /status.json HTTP/1.1\r\nHost: x\r\n")
            sent += 1
        except OSError:  # (past the connection limit and the listen backlog: not accepted yet)
            pass
    print(f"ok: 200 concurrent connections opened, {sent} of them took a partial request", flush=True)
    c0, t0 = commits(log), time.time()
    while time.time() - t0 < hold and commits(log) < c0 + 2:  # the coordinator keeps committing
        time.sleep(0.1)
    c1 = commits(log)
    print(f"{'ok' if c1 > c0 else 'FAIL'}: the 200 connections held {time.time() - t0:.1f} s; "
          f"the coordinator committed {c1 - c0} revisions meanwhile")
    bad += c1 <= c0
    for s in held:
        s.close()
    time.sleep(0.5)
    check("10 KB URL", raw(port, b"GET /" + b"a" * 10240 + b" HTTP/1.1\r\nHost: x\r\n\r\n"))
    check("POST", raw(port, b"POST /status.json HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"))
    check("DELETE", raw(port, b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n"))
    check("unknown path", raw(port, b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"))
    check("malformed header", raw(port, b"GET / HTTP/1.1\r\nno colon here\r\n\r\n"), ok_closed=True)
    try:
        j = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=10))
        print(f"ok: /status.json served afterwards (revision {j['revision']})")
    except Exception as e:
        print(f"FAIL: /status.json afterwards: {e}")
        bad += 1
    return 1 if bad else 0

def numbers(status_path, metrics_path, runs):
    from prometheus_client.parser import text_string_to_metric_families
    st = json.load(open(status_path))
    sums = [json.load(open(f"{r}/summary.json")) for r in runs]
    errs = []
    def eq(what, got, want):
        if got != want: errs.append(f"{what}: page {got}, islands {want}")
    isl = {i["island"]: i for i in st["islands"]}
    eq("islands", sorted(isl), list(range(len(runs))))
    eq("revision", st["revision"], sums[0]["merges"])
    eq("merges", st["merges"], sums[0]["merges"])
    eq("step", st["step"], sums[0]["steps"])
    eq("counts", st["counts"], {"registered": len(runs), "left": 0, "restarted": 0, "state_joins": 0, "finished": len(runs)})
    eq("history", [h["revision"] for h in st["history"]], list(range(1, st["revision"] + 1)))
    for k, s in enumerate(sums):
        i = isl.get(k, {})
        eq(f"island {k} state", i.get("state"), "finished")
        eq(f"island {k} step", i.get("step"), s["steps"])
        eq(f"island {k} revision", i.get("revision"), st["revision"])
        eq(f"island {k} tokens", i.get("tokens"), s["tokens_contributed_per_island"])
        eq(f"island {k} tokens_per_step", i.get("tokens_per_step"), s["tokens_per_step"])
        eq(f"island {k} contributions", i.get("contributions"), s["merges"])
        eq(f"island {k} sent_bytes", i.get("sent_bytes"), s["net"]["wire_bytes"])
        if i.get("loss") is None or abs(i["loss"] - s["final_train_loss"]) > 1e-5 * abs(s["final_train_loss"]):
            errs.append(f"island {k} loss: page {i.get('loss')}, island {s['final_train_loss']}")
    eq("tokens", st["tokens"], sum(s["tokens_contributed_per_island"] for s in sums))
    fams = {f.name: f for f in text_string_to_metric_families(open(metrics_path).read())}
    for f in fams.values():
        if not f.documentation: errs.append(f"metric {f.name}: no HELP")
        if f.type == "counter" and any(not x.name.endswith("_total") for x in f.samples):
            errs.append(f"counter {f.name}: a sample without _total")
    def one(name, labels=None):
        f = fams.get(name)
        xs = [x.value for x in (f.samples if f else []) if labels is None or all(x.labels.get(a) == b for a, b in labels.items())]
        return xs[0] if len(xs) == 1 else None
    eq("metric revision", one("atoll_coordinator_revision"), st["revision"])
    eq("metric merges_total", one("atoll_coordinator_merges"), sums[0]["merges"])
    eq("metric tokens_total", one("atoll_coordinator_tokens"), st["tokens"])
    eq("metric finished_total", one("atoll_coordinator_finished"), len(runs))
    for k, s in enumerate(sums):
        eq(f"metric island {k} tokens_total", one("atoll_island_tokens", {"island": str(k)}), s["tokens_contributed_per_island"])
        eq(f"metric island {k} step", one("atoll_island_step", {"island": str(k)}), s["steps"])
        eq(f"metric island {k} sent_bytes_total", one("atoll_island_sent_bytes", {"island": str(k)}), s["net"]["wire_bytes"])
        eq(f"metric island {k} contributions_total", one("atoll_island_contributions", {"island": str(k)}), s["merges"])
    for e in errs: print("FAIL:", e)
    if not errs:
        print(f"revision {st['revision']}, steps, tokens, losses, bytes and contributions of {len(runs)} islands "
              f"match their summary.json; {len(fams)} metric families parse")
    return 1 if errs else 0

class Rows(HTMLParser):
    def __init__(self):
        super().__init__(); self.inside = False; self.rows = []; self.cell = None
    def handle_starttag(self, tag, attrs):
        if tag == "table" and ("id", "islands") in attrs: self.inside = True
        elif self.inside and tag == "tr": self.rows.append([])
        elif self.inside and tag == "td": self.cell = ""
    def handle_endtag(self, tag):
        if tag == "table": self.inside = False
        elif tag == "td" and self.cell is not None: self.rows[-1].append(self.cell.strip()); self.cell = None
    def handle_data(self, d):
        if self.cell is not None: self.cell += d

def dom(path, k):
    p = Rows(); p.feed(open(path).read())
    ids = [r[0] for r in p.rows if r]
    if ids != [str(i) for i in range(k)]:
        print(f"FAIL: the page's table lists islands {ids}, expected 0..{k - 1}"); return 1
    print(f"the page's table lists islands {', '.join(ids)} ({', '.join(r[1] for r in p.rows if r)})")
    return 0

if __name__ == "__main__":
    a = sys.argv
    sys.exit(abuse(int(a[2]), float(a[3]), a[4]) if a[1] == "abuse" else numbers(a[2], a[3], a[4:]) if a[1] == "numbers" else dom(a[2], int(a[3])))
