#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh, in one go (issue 7, CUDA graphs): the
# gpu-labelled model/engine tests (graph-mode decode against --enforce-eager on the tiny checkpoints
# and on a random Qwen3-0.6B-shape checkpoint), the decode-attention op tests, compute-sanitizer
# memcheck on a short graph-mode `generate`, and `bench latency` with CUDA graphs and with
# --enforce-eager on the Qwen3-0.6B and Qwen3-8B shapes (prompt 128, 256 new tokens) plus
# `bench throughput` of the 0.6B shape at 256 concurrent. Each part has a time limit; logs go to
# $OUT (or ./out)/graphs, packed into graphs_results.tgz after every part.
#
#   bash run_decode_graphs_on_gpu.sh [--parts LIST] [--batches LIST]
#     --parts: comma-separated of tests, memcheck, small, throughput, large (default: all)
#     --batches: bench latency batch sizes (default 1,8,32,128,256)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
parts="tests,memcheck,small,throughput,large" batches="1,8,32,128,256"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --parts) parts="$2"; shift ;;
    --batches) batches="$2"; shift ;;
    *) echo "run_decode_graphs_on_gpu.sh: unknown argument '$1' (--parts LIST, --batches LIST)" >&2; exit 2 ;;
  esac
  shift
done
source "$here/gpu_env.sh"
logs="$out/graphs"
mkdir -p "$logs"
work="${WORK_DIR:-/tmp/omnistage-bench}"
mkdir -p "$work"
omni="$here/omnistage"
status=0
want() { [[ ",$parts," == *",$1,"* ]]; }
section() {
  tar czf "$out/graphs_results.tgz" -C "$out" graphs
  echo "=== $1 ($(date -u +%T), ${SECONDS}s)"
}
checkpoint() {  # name shape limit
  [[ -d "$work/$1" ]] || timeout "$3" "$here/make_random_checkpoint" --shape "$2" --out "$work/$1" \
      > "$logs/make_$1.log" 2>&1 || status=1
}

if want tests; then
  section "checkpoint qwen3-0.6b"
  checkpoint qwen3-0.6b qwen3-0.6b 60
  section "gpu tests"
  OMNI_TINY_QWEN_DIR="$here/tiny_qwen" OMNI_DECODE_GRAPH_CHECKPOINT="$work/qwen3-0.6b" timeout 150 \
      "$here/model_gpu_test" > "$logs/model_gpu_test.log" 2>&1 || status=1
  grep -E "^\[  (FAILED|PASSED|  OK) " "$logs/model_gpu_test.log" | tail -40
  timeout 60 "$here/tensor_test" --gtest_filter='*PagedDecodeAttention*:*PagedAttention*:*StoreKv*' \
      > "$logs/tensor_test.log" 2>&1 || status=1
  tail -3 "$logs/tensor_test.log"
fi

if want memcheck; then
  section "compute-sanitizer memcheck: generate (CUDA graphs)"
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  timeout 120 "$sanitizer" --tool memcheck --error-exitcode 3 "$omni" generate --device cuda \
      --model "$here/tiny_qwen/qwen3_gqa2_tied_bf16_v5" --prompt-token-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 \
      --max-tokens 12 --temperature 0 --ignore-eos --num-gpu-blocks-override 8 --max-num-seqs 4 --output json \
      > "$logs/memcheck_generate.log" 2>&1 || status=1
  grep -E "decode steps padded|ERROR SUMMARY|token_ids" "$logs/memcheck_generate.log" | head -5
fi

latency() {  # name mode limit iters
  local extra=()
  [[ $2 == eager ]] && extra=(--enforce-eager)
  section "bench latency $1 $2"
  timeout "$3" "$omni" bench latency --model "$work/$1" --device cuda --input-len 128 --output-len 256 \
      --batch-size "$batches" --num-iters-warmup 1 --num-iters "$4" "${extra[@]}" \
      --output-json "$logs/latency_$1_$2.json" > "$logs/latency_$1_$2.log" 2>&1 || status=1
  grep -v "^\[" "$logs/latency_$1_$2.log" | tail -8
}

if want small; then
  checkpoint qwen3-0.6b qwen3-0.6b 60
  latency qwen3-0.6b graphs 60 2
  latency qwen3-0.6b eager 60 1
fi

if want throughput; then
  for mode in graphs eager; do
    extra=()
    [[ $mode == eager ]] && extra=(--enforce-eager)
    section "bench throughput qwen3-0.6b $mode"
    timeout 40 "$omni" bench throughput --model "$work/qwen3-0.6b" --device cuda --num-prompts 1024 --input-len 128 \
        --output-len 256 --max-num-seqs 256 "${extra[@]}" --output-json "$logs/throughput_qwen3-0.6b_$mode.json" \
        > "$logs/throughput_qwen3-0.6b_$mode.log" 2>&1 || status=1
    grep -E "Throughput|Elapsed" "$logs/throughput_qwen3-0.6b_$mode.log"
  done
fi

if want large; then
  section "checkpoint qwen3-8b"
  checkpoint qwen3-8b qwen3-8b 100
  latency qwen3-8b graphs 80 1
  latency qwen3-8b eager 80 1
fi

section "done, status $status"
exit $status
