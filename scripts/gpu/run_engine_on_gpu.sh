#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh, in one go (issue 7): the gpu-labelled
# model/engine tests, compute-sanitizer (memcheck) on a short `generate --device cuda`, our
# `bench latency` on random-weight Qwen3-0.6B and Qwen3-8B shapes (prompt 128, 256 new tokens,
# batch 1, 8, 32, 128, 256), `bench throughput` at 256 concurrent sequences, and the Hugging Face
# transformers peer with the copy bandwidth (scripts/reference/hf_generate_bench.py); prints the
# side-by-side table last. Each part has a time limit so the whole run stays under ten minutes;
# logs and JSON results go to $OUT (or ./out), packed into engine_results.tgz.
#
#   bash run_engine_on_gpu.sh [--quick] [--batches LIST] [--no-memcheck] [--no-peer] [--no-compile] [--async]
#     --quick: batch 1 and 8 only, no 8B, no torch.compile; --batches: the bench latency batch sizes
#     (comma-separated); --no-memcheck, --no-peer: skip compute-sanitizer, the transformers peer;
#     --no-compile: the peer runs eager only (torch.compile has not finished within its limit yet);
#     --async: a second bench latency and bench throughput of the 0.6B shape with --async-scheduling
#     (rows "qwen3-0.6b-async" in the table)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
quick=0 memcheck=1 peer=1 compile=1 async=0 batches="1,8,32,128,256"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; batches="1,8" ;;
    --batches) batches="$2"; shift ;;
    --no-memcheck) memcheck=0 ;;
    --no-peer) peer=0 ;;
    --no-compile) compile=0 ;;
    --async) async=1 ;;
    *) echo "run_engine_on_gpu.sh: unknown argument '$1' (--quick, --batches LIST, --no-memcheck, --no-peer, --no-compile, --async)" >&2; exit 2 ;;
  esac
  shift
done
source "$here/gpu_env.sh"
logs="$out/engine"
mkdir -p "$logs"
work="${WORK_DIR:-/tmp/omnistage-bench}"
mkdir -p "$work"
omni="$here/omnistage"
status=0
# The logs are packed after every part: a run cut short still brings back what it measured.
section() {
  tar czf "$out/engine_results.tgz" -C "$out" engine
  echo "=== $1 ($(date -u +%T), ${SECONDS}s)"
}

section "gpu tests"
OMNI_TINY_QWEN_DIR="$here/tiny_qwen" timeout 60 "$here/model_gpu_test" > "$logs/model_gpu_test.log" 2>&1 || status=1
tail -3 "$logs/model_gpu_test.log"

# The stage's load path (runtime/tensor_parallel_model.h) with one rank on the GPU.
section "generate --device cuda --tensor-parallel-size 1"
timeout 30 "$omni" generate --device cuda --tensor-parallel-size 1 --model "$here/tiny_qwen/qwen3_gqa2_tied_bf16_v5" \
    --prompt-token-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 --max-tokens 12 --temperature 0 --ignore-eos \
    --num-gpu-blocks-override 8 --output json > "$logs/generate_tp1.log" 2>&1 || status=1
tail -2 "$logs/generate_tp1.log"

if [[ $memcheck == 1 ]]; then
  section "compute-sanitizer memcheck: generate --device cuda"
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  timeout 60 "$sanitizer" --tool memcheck --error-exitcode 3 "$omni" generate --device cuda \
      --model "$here/tiny_qwen/qwen3_gqa2_tied_bf16_v5" --prompt-token-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 \
      --max-tokens 12 --temperature 0 --ignore-eos --num-gpu-blocks-override 8 --output json \
      > "$logs/memcheck_generate.log" 2>&1 || status=1
  tail -4 "$logs/memcheck_generate.log"
fi

run_latency() {  # name shape limit iters [label engine-flags...]: the results are filed under label
  local name="$1" shape="$2" limit="$3" iters="$4"
  shift 4
  local label="${1:-$name}"
  [[ $# -gt 0 ]] && shift
  section "bench latency $label"
  [[ -d "$work/$name" ]] || timeout 90 "$here/make_random_checkpoint" --shape "$shape" --out "$work/$name" \
      > "$logs/make_$name.log" 2>&1 || status=1
  timeout "$limit" "$omni" bench latency --model "$work/$name" --device cuda --input-len 128 --output-len 256 \
      --batch-size "$batches" --num-iters-warmup 1 --num-iters "$iters" --output-json "$logs/latency_$label.json" \
      "$@" > "$logs/latency_$label.log" 2>&1 || status=1
  cat "$logs/latency_$label.log" | grep -v "^\[" || true
}

run_latency qwen3-0.6b qwen3-0.6b 90 2
section "bench throughput qwen3-0.6b"
timeout 45 "$omni" bench throughput --model "$work/qwen3-0.6b" --device cuda --num-prompts 1024 --input-len 128 \
    --output-len 256 --max-num-seqs 256 --output-json "$logs/throughput_qwen3-0.6b.json" \
    > "$logs/throughput_qwen3-0.6b.log" 2>&1 || status=1
grep -E "Throughput|Elapsed" "$logs/throughput_qwen3-0.6b.log"
if [[ $async == 1 ]]; then
  run_latency qwen3-0.6b qwen3-0.6b 90 2 qwen3-0.6b-async --async-scheduling
  section "bench throughput qwen3-0.6b --async-scheduling"
  timeout 45 "$omni" bench throughput --model "$work/qwen3-0.6b" --device cuda --num-prompts 1024 --input-len 128 \
      --output-len 256 --max-num-seqs 256 --async-scheduling --output-json "$logs/throughput_qwen3-0.6b-async.json" \
      > "$logs/throughput_qwen3-0.6b-async.log" 2>&1 || status=1
  grep -E "Throughput|Elapsed" "$logs/throughput_qwen3-0.6b-async.log"
fi
[[ $quick == 0 ]] && run_latency qwen3-8b qwen3-8b 110 1

if [[ $peer == 1 ]]; then
  section "transformers peer"
  models=(--model "$work/qwen3-0.6b")
  [[ $quick == 0 ]] && models+=(--model "$work/qwen3-8b")
  compile_flag=()
  [[ $quick == 0 && $compile == 1 ]] && compile_flag=(--compile)
  PYTHONUNBUFFERED=1 timeout 170 python3 "$here/hf_generate_bench.py" "${models[@]}" --batch-sizes "$batches" \
      --input-len 128 --output-len 256 "${compile_flag[@]}" --out "$logs/hf.json" > "$logs/hf.log" 2>&1 || status=1
  cat "$logs/hf.log" | grep -v Warning | tail -30
fi

section "summary"
python3 "$here/summarize_bench.py" "$logs" | tee "$logs/summary.md"
section "done, status $status"
exit $status
