#!/usr/bin/env python3
"""Turns the results of run_omni_speech_bench_on_gpu.sh (bench_c<N>.json, `omnistage bench serve
--result-file` of chats with text and audio output) into a markdown table, one row per
concurrency: requests completed / failed, first-audio latency (TTFP: mean / median / p99), RTF
(E2E / audio seconds: mean / median / p99), audio seconds per second, mean audio seconds per
reply, TTFT (mean / median / p99), TPOT (mean / p99) and E2E (mean / p99), then the server's
per-stage means from /metrics where the run recorded them.

    python3 summarize_omni_speech_bench.py LOG_DIR [LOG_DIR ...]     # each an omni_speech_<label> folder
"""
import glob
import json
import os
import re
import sys


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def triple(report, metric, digits, stats=("mean", "median", "p99"), suffix="_ms"):
    return " / ".join(fmt(report.get(f"{s}_{metric}{suffix}"), digits) for s in stats)


def server_means(report):
    """The server's histogram means in ms, by metric name, from the run's /metrics deltas."""
    return {name: delta["mean_ms"] for name, delta in (report.get("server_time") or {}).items()
            if isinstance(delta, dict) and "mean_ms" in delta}


def row(label, path):
    report = json.load(open(path))
    c = int(re.search(r"bench_c(\d+)\.json$", path).group(1))
    durations = [d for d in report.get("audio_durations", []) if d > 0]
    cells = [
        label, str(c), f"{report.get('completed', 0)} / {report.get('failed', 0)}",
        triple(report, "ttfp", 0), triple(report, "rtf", 3, suffix=""),
        fmt(report.get("audio_throughput"), 1), fmt(sum(durations) / len(durations) if durations else None, 1),
        triple(report, "ttft", 0), triple(report, "tpot", 1, ("mean", "p99")), triple(report, "e2el", 0, ("mean", "p99")),
    ]
    return c, "| " + " | ".join(cells) + " |", server_means(report)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("| run | concurrency | completed / failed | TTFP (ms) | RTF | audio-s/s | audio s / reply "
          "| TTFT (ms) | TPOT (ms) mean / p99 | E2E (ms) mean / p99 |")
    print("|" + "---|" * 10)
    servers = []
    for folder in sys.argv[1:]:
        label = os.path.basename(os.path.normpath(folder)).removeprefix("omni_speech_")
        paths = glob.glob(os.path.join(folder, "bench_c*.json"))
        if not paths:
            print(f"| {label} | no bench_c*.json in {folder} |")
        for c, line, means in sorted((row(label, p) for p in paths), key=lambda r: r[0]):
            print(line)
            if means:
                servers.append((label, c, means))
    for label, c, means in servers:
        print(f"\nserver means (ms), {label} c={c}:")
        for name in sorted(means):
            print(f"  {name}: {means[name]:.2f}")


if __name__ == "__main__":
    main()
