"""bench/bpb/run.sh's report: reads WORK/{gpt2,llama}/summary.json and WORK/{bytes,bpe}/manifest.json,
writes RESULTS (results.json) and prints a Markdown table. Arguments as run.sh passes them:
WORK RESULTS CPU THREADS STEPS VOCAB TINY LOAD_START LOAD_END COMMIT "L H C TB BB TL BL MULT FLOPS_GPT2 FLOPS_LLAMA"."""
import datetime, json, math, sys
tmp, results, cpu, threads, steps, vocab, tiny, load0, load1, commit, dims = sys.argv[1:12]
L, H, C, TB, BB, TL, BL, MULT, FB, FL = map(int, dims.split())
steps = int(steps)
rows = {}
for name, data, T, B, fpt in (("gpt2_bytes", "bytes", TB, BB, FB), ("llama_bpe", "bpe", TL, BL, FL)):
    s = json.load(open(f"{tmp}/{name.split('_')[0]}/summary.json"))
    m = json.load(open(f"{tmp}/{data}/manifest.json"))
    assert abs(s["flops_per_token"] - fpt) < 1e-6 * fpt, (name, s["flops_per_token"], fpt)
    emb = m["vocab"] * C * (1 if name == "gpt2_bytes" else 2) + (T * C if name == "gpt2_bytes" else 0)
    # the bits per byte again from the manifest's counts: val_loss x tokens / bytes / ln 2
    again = s["final_val_loss"] * m["val_tokens"] / m["val_bytes"] / math.log(2)
    assert abs(again - s["final_val_bpb"]) < 1e-9 * again, (again, s["final_val_bpb"])
    rows[name] = {
        "arch": "gpt2" if name == "gpt2_bytes" else "llama", "tokenizer": m["tokenizer"], "vocab": m["vocab"],
        "context": T, "batch": B, "steps": steps, "params": s["params"], "non_embedding_params": s["params"] - emb,
        "flops_per_token": s["flops_per_token"], "train_flops": s["flops_per_token"] * T * B * steps,
        "train_tokens": T * B * steps, "val_bytes_per_token": m["val_bytes"] / m["val_tokens"],
        "train_bytes_per_token": m["train_bytes"] / m["train_tokens"],
        "train_bytes_seen": T * B * steps * m["train_bytes"] / m["train_tokens"],
        "final_val_loss_nats_per_token": s["final_val_loss"], "final_val_bpb": s["final_val_bpb"],
        "final_train_loss": s["final_train_loss"], "tokens_per_second": s["tokens_per_second"],
        "bytes_per_second": s["tokens_per_second"] * m["train_bytes"] / m["train_tokens"]}
out = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "cpu": cpu,
       "threads": int(threads), "commit": commit, "tiny": tiny == "1",
       "load_average_start_end": [load0, load1],
       "note": "machine shared with other jobs: tokens/s are one run each on a loaded machine; bits per byte do not depend on load",
       "flops_formula": "6*(matrix params of the blocks + vocab*dim for the head) + 6*layers*dim*context per token",
       "rows": rows}
if tiny != "1":
    json.dump(out, open(results, "w"), indent=2)
print(f"Run {out['date']} on {cpu}, {threads} threads, load average {load0} -> {load1} (shared machine)\n")
print("| model | tokens | vocab | context x batch | non-emb params | train TFLOP | val bytes/token | val loss (nats/token) | **val bits/byte** | tokens/s | bytes/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for n, r in rows.items():
    print(f"| {'GPT-2' if r['arch'] == 'gpt2' else 'Llama'} | {r['tokenizer']} | {r['vocab']} | {r['context']} x {r['batch']} | "
          f"{r['non_embedding_params'] / 1e6:.2f}M | {r['train_flops'] / 1e12:.2f} | {r['val_bytes_per_token']:.2f} | "
          f"{r['final_val_loss_nats_per_token']:.3f} | **{r['final_val_bpb']:.3f}** | {r['tokens_per_second']:.0f} | {r['bytes_per_second']:.0f} |")
