#!/usr/bin/env python3
"""Turns the logs of run_tts_bench_on_gpu.sh into the rows of docs/performance.md's Qwen3-TTS tables:
TTFP, RTF and E2E (mean / median / p99), audio-s/s, and the server's per-stage means from /metrics
(talker step, code predictor, code2wav step, the hops of stage 0 and 1, HTTP pre + post).

    python3 summarize_tts_bench.py LOG_DIR [LOG_DIR ...]     # each a tts_<label> folder
"""
import glob
import os
import re
import sys


def read_log(path):
    text = open(path).read()

    def value(label):
        m = re.search(rf"^{re.escape(label)}:\s+([\d.]+)", text, re.M)
        return float(m.group(1)) if m else None

    def metric(name):
        m = re.search(rf"^{re.escape(name)}\n\s+mean \(ms\) over \d+:\s+([\d.]+)", text, re.M)
        return float(m.group(1)) if m else None

    return value, metric


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def row(label, path):
    value, metric = read_log(path)
    m = re.search(r"bench_(?:(\w+)_)?c(\d+)\.log$", path)
    c = int(m.group(2))
    if m.group(1) and m.group(1) != "main":  # a voice-clone run: cache or nocache
        label = f"{label} ({m.group(1)})"
    triple = lambda name, d: " / ".join(fmt(value(f"{k} {name}"), d) for k in ("Mean", "Median", "P99"))
    http = [metric('omnistage:http_request_preprocess_seconds{model_name="tts"}'),
            metric('omnistage:http_response_postprocess_seconds{model_name="tts"}')]
    cells = [
        label, str(c), fmt(value("Successful requests"), 0), triple("TTFP (ms)", 1), triple("RTF", 3),
        fmt(value("Audio throughput (audio-s/s)")), triple("E2EL (ms)", 0),
        fmt(metric('omnistage:stage_step_seconds{stage="0",part="talker"}'), 2),
        fmt(metric('omnistage:stage_step_seconds{stage="0",part="code_predictor"}'), 2),
        fmt(metric('omnistage:stage_step_seconds{stage="1",part="step"}'), 1),
        fmt(metric('omnistage:stage_hop_seconds{stage="0"}')) + " / " +
        fmt(metric('omnistage:stage_hop_seconds{stage="1"}')),
        fmt(sum(http), 2) if None not in http else "-",
    ]
    return (label, c), "| " + " | ".join(cells) + " |"


def main():
    print("| run | concurrency | requests | TTFP (ms) | RTF | audio-s/s | E2E (ms) | talker step (ms) "
          "| code predictor (ms) | code2wav step (ms) | hop stage 0 / 1 (ms) | HTTP (ms) |")
    print("|" + "---|" * 12)
    for folder in sys.argv[1:]:
        label = os.path.basename(os.path.normpath(folder)).removeprefix("tts_")
        rows = [row(label, p) for p in glob.glob(os.path.join(folder, "bench_*.log"))]
        for _, line in sorted(rows):
            print(line)


if __name__ == "__main__":
    main()
