#!/bin/sh
# The coordinator's status page (--status-listen, docs/islands.md "Status page"), on
# loopback: a coordinator and 3 islands, run twice, without and with the page. With it,
# while the islands start and train, 200 connections are held open and malformed HTTP,
# a 10 KB URL, other methods and an unknown path each get a 4xx (status_check.py
# abuse); the islands' run still ends bit-identical to the run without the page. After
# the run (--status-linger) /status.json's and /metrics' numbers (revision, merges,
# steps, tokens, losses, bytes, contributions of each island) equal the islands' own
# summary.json, /metrics parses with prometheus_client's parser (from the venv of
# scripts/venv.sh, use_venv), and headless Chromium loads
# / (a screenshot; its DOM's table lists the 3 islands; without chromium that one
# check fails, after the others ran). A bad --status-listen value is refused in one line, an address in use too.
#   usage: test_status_http.sh ATOLL SRC
ATOLL=$1; SRC=$2
. "$SRC/tests/cli/common.sh"
. "$SRC/tests/net/islands_lib.sh"
use_venv prometheus_client
CHECK="$SRC/tests/net/status_check.py"
small_data

for bad in 127.0.0.1:99999 example.org:80 127.0.0.1: ; do
  expect_error "--status-listen $bad" "--status-listen $bad: expected HOST:PORT" \
    $ATOLL coordinator --listen tcp://127.0.0.1:1 --keys "$TMP/nokeys" --status-listen "$bad"
done

D="$TMP/st"; mkdir -p "$D"
net_keys "$D" 3 || { fail keys; finish; }
M="--layers 2 --heads 2 --dim 32 --context 32 --batch 2 --threads 1 --data $TMP/data --eval-every 6 --save-every 0 --steps 36 --sync-every 3 --islands 3"

# run NAME [coordinator flags]: the coordinator and 3 islands (outputs D/NAME/iK);
# with ABUSE=PORT, status_check.py abuse runs beside the islands
run() {
  name=$1; shift
  mkdir -p "$D/$name"
  set -- "$@" -- $(free_ports 4)
  flags=""; while [ "$1" != "--" ]; do flags="$flags $1"; shift; done; shift
  cport=$1; shift
  : >"$D/coord.log"
  start_coordinator "$D" $cport 3 --island-timeout 20 --state "$D/$name/coord.json" $flags
  if [ -n "${ABUSE:-}" ]; then
    i=0; while [ $i -lt 50 ] && ! grep -q "status page at" "$D/coord.log"; do sleep 0.2; i=$((i + 1)); done
    timeout 60 $PY "$CHECK" abuse $ABUSE 30 "$D/coord.log" >"$D/abuse.out" 2>&1 &
    abuse_pid=$!
    # the islands start once the 200 connections are open
    i=0; while [ $i -lt 50 ] && ! grep -q "connections opened" "$D/abuse.out"; do sleep 0.2; i=$((i + 1)); done
  fi
  pids=""; k=0
  for p in "$@"; do
    timeout -k 5 120 $ATOLL train $M $(island_flags "$D" $cport $k $p) --out "$D/$name/i$k" >/dev/null 2>"$D/$name/err$k" &
    pids="$pids $!"; k=$((k + 1))
  done
  ok=1
  for p in $pids; do wait $p || ok=0; done
  [ $ok -eq 1 ] && pass "$name: 3 islands finished" || fail "$name: an island failed: $(tail -n 2 "$D/$name"/err*)"
  if [ -n "${ABUSE:-}" ]; then
    wait $abuse_pid && pass "bad requests while the islands ran: $(grep -c '^ok' "$D/abuse.out") checks" \
      || fail "bad requests: $(grep -v '^ok' "$D/abuse.out")"
  fi
}

run plain
kill $COORD_PID 2>/dev/null; wait $COORD_PID 2>/dev/null
SPORT=$(free_ports 1)
ABUSE=$SPORT run page --status-listen 127.0.0.1:$SPORT --status-linger 120
cat "$D/abuse.out"
for k in 0 1 2; do
  out=$($PY "$SRC/tests/net/same_run.py" "$D/plain/i$k" "$D/page/i$k") && pass "island $k with the page == without: $out" || fail "island $k: $out"
done

U="http://127.0.0.1:$SPORT"
curl -sf --max-time 10 "$U/status.json" >"$D/status.json" && curl -sf --max-time 10 "$U/metrics" >"$D/metrics.txt" \
  || fail "cannot fetch /status.json or /metrics after the run"
"$VPY" "$CHECK" numbers "$D/status.json" "$D/metrics.txt" "$D/page/i0" "$D/page/i1" "$D/page/i2" >"$D/numbers.out" 2>&1 \
  && pass "$(cat "$D/numbers.out")" || fail "numbers: $(cat "$D/numbers.out")"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$U/")" = 405 ] && pass "curl -X POST: 405" || fail "curl -X POST is not 405"

# the page's address in use: the second coordinator stops with one error line
timeout 30 $ATOLL coordinator --listen tcp://127.0.0.1:0 --keys "$D/coord" --status-listen 127.0.0.1:$SPORT >/dev/null 2>"$D/inuse.err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c 'error' "$D/inuse.err")" -eq 1 ] && grep -q "status-listen 127.0.0.1:$SPORT: cannot listen: Address already in use" "$D/inuse.err" \
  && pass "address in use: $(grep error "$D/inuse.err")" || fail "address in use (status $rc): $(cat "$D/inuse.err")"

# headless Chromium: a screenshot of /, and its DOM (scripts/setup.sh installs it; the
# checks above ran either way)
if ! command -v chromium >/dev/null; then
  fail "chromium is not installed (scripts/setup.sh installs it): the page was not loaded in a browser"
else
  CH="chromium --headless --no-sandbox --disable-gpu --user-data-dir=$D/chrome --window-size=1000,700"
  timeout 90 $CH --screenshot="$D/page.png" "$U/" >"$D/chrome.log" 2>&1
  [ "$(head -c 4 "$D/page.png" 2>/dev/null | od -An -c | tr -d ' ')" = "211PNG" ] && pass "chromium: a screenshot of / ($(wc -c <"$D/page.png") bytes)" \
    || fail "chromium: no screenshot: $(tail -n 2 "$D/chrome.log")"
  timeout 90 $CH --dump-dom "$U/" >"$D/dom.html" 2>"$D/chrome.log"
  out=$($PY "$CHECK" dom "$D/dom.html" 3) && pass "chromium: $out" || fail "chromium: $out"
fi

# SIGTERM ends the linger at once
t0=$(date +%s)
kill $COORD_PID; wait $COORD_PID; rc=$?
[ $rc -eq 0 ] && [ $(( $(date +%s) - t0 )) -lt 10 ] && pass "SIGTERM ended the linger (status 0)" || fail "after SIGTERM: status $rc"
commits=$(grep -c "committed: revision" "$D/coord.log")
[ "$commits" -eq 12 ] && pass "the coordinator committed 12 revisions beside the page" || fail "$commits commits: $(tail -n 3 "$D/coord.log")"
finish
