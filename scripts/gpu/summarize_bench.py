#!/usr/bin/env python3
"""Joins the results of run_engine_on_gpu.sh into the markdown table of docs/performance.md:
our `bench latency` (latency_<model>.json), our `bench throughput` (throughput_<model>.json) and the
transformers peer with the copy bandwidth (hf.json), per model and batch size.

    python3 summarize_bench.py LOG_DIR
"""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def main():
    logs = sys.argv[1]
    hf = load(os.path.join(logs, "hf.json")) or {"models": []}
    bandwidth = hf.get("copy_bandwidth_bytes_per_s")
    if bandwidth:
        print(f"copy bandwidth: {bandwidth / 1e12:.2f} TB/s (read + write, 4 GiB device-to-device copy)\n")
    print("| model | batch | ours: prefill (ms) | ours: decode (ms/step) | ours: output tok/s | "
          "transformers eager: decode (ms/step) | speed-up | roofline (ms/step) |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(logs, "latency_*.json"))):
        name = os.path.basename(path)[len("latency_"):-len(".json")]
        ours = load(path)
        peer = next((m for m in hf["models"] if os.path.basename(m["model"].rstrip("/")) == name), None)
        eager = {r["batch_size"]: r for r in peer["eager"]} if peer else {}
        for row in ours["results"]:
            b = row["batch_size"]
            theirs = eager.get(b, {}).get("decode_ms_per_step")
            mine = row["decode_ms_per_step_mean"]
            speedup = theirs / mine if theirs and mine else None
            roofline = peer["roofline_ms_per_step"] if peer else None
            print(f"| {name} | {b} | {fmt(row['prefill_ms'])} | {fmt(mine, 3)} | {fmt(row['output_tokens_per_s'], 0)} | "
                  f"{fmt(theirs, 3)} | {fmt(speedup, 1)}x | {fmt(roofline, 3)} |")
    for peer in hf["models"]:
        for row in peer.get("compiled", []):
            name = os.path.basename(peer["model"].rstrip("/"))
            if "error" in row:
                print(f"\ntransformers compiled, {name} batch {row['batch_size']}: failed: {row['error'][-300:]}")
            else:
                print(f"\ntransformers compiled ({row['how']}), {name} batch {row['batch_size']}: "
                      f"decode {row['decode_ms_per_step']:.3f} ms/step, prefill {row['prefill_ms']:.2f} ms")
    for path in sorted(glob.glob(os.path.join(logs, "throughput_*.json"))):
        t = load(path)
        if t:
            print(f"\nbench throughput {os.path.basename(path)[11:-5]}: {t['num_prompts']} requests, "
                  f"{t['input_len']} in / {t['output_len']} out, {t['max_num_seqs']} concurrent: "
                  f"{t['output_tokens_per_second']:.0f} output tokens/s, {t['requests_per_second']:.2f} requests/s")


if __name__ == "__main__":
    main()
