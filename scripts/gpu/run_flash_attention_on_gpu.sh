#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh (binaries: tests/tensor_test and
# bench/cuda_op_bench), from the checkout's root: the fused dense attention kernel
# (cuda/dense_flash_attention.cu) against its float64 reference and the cuBLASLt path, the image
# ops that route through it, its time on Z-Image's shapes beside the cuBLASLt path (`cuda_op_bench
# ITERATIONS dense_attention`), then compute-sanitizer memcheck and racecheck on the small cases.
# Logs go to $OUT (or ./out).
#
#   bash .devrun/gpu/go.sh run_flash_attention_on_gpu.sh [ITERATIONS]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
source "$here/gpu_env.sh"
iterations="${1:-50}"
status=0

OMNI_OPS_TEST_REPORT=1 "$here/tensor_test" --gtest_filter='*FlashAttention*:*ImageOpsCuda*' \
    > "$out/flash_attention_test.log" 2>&1 || status=1
grep -E "^\[error\]|FAILED|Failure|Expected|Which is|max diff" "$out/flash_attention_test.log" | head -40
tail -3 "$out/flash_attention_test.log"

"$here/cuda_op_bench" "$iterations" dense_attention > "$out/dense_attention_bench.log" 2>&1 || status=1
cat "$out/dense_attention_bench.log"

small='*FlashAttention*-*ZImage*'
if command -v compute-sanitizer > /dev/null || [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  timeout 100 "$sanitizer" --tool memcheck --error-exitcode 3 "$here/tensor_test" --gtest_filter="$small" \
      > "$out/flash_memcheck.log" 2>&1 || status=1
  tail -4 "$out/flash_memcheck.log"
  # Shared-memory hazards between the warps that share each K/V tile.
  timeout 80 "$sanitizer" --tool racecheck --error-exitcode 3 "$here/tensor_test" \
      --gtest_filter='*FlashAttention*MatchesTheFloat64*/bfloat16:*FlashAttention*TakesSixteen*/bfloat16' \
      > "$out/flash_racecheck.log" 2>&1 || status=1
  tail -4 "$out/flash_racecheck.log"
else
  echo "compute-sanitizer: not installed" | tee "$out/flash_memcheck.log"
fi

exit $status
