#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh: the op tests on every backend, short
# compute-sanitizer memcheck and racecheck runs of the CUDA op tests, and the CUDA benchmarks when
# bundled.
# Logs go to $OUT (or ./out).
#
#   bash run_on_gpu.sh
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"

source "$here/gpu_env.sh"
ldd "$here/tensor_test" | grep -E "not found|cublas|cudart" >> "$out/environment.log" 2>&1 || true

status=0
# Every backend; the CPU ones double as a check that the bundle runs on this image.
OMNI_OPS_TEST_REPORT=1 "$here/tensor_test" > "$out/tensor_test.log" 2>&1 || status=1
grep -E "^\[error\]" "$out/tensor_test.log" > "$out/max_errors.log"
tail -5 "$out/tensor_test.log"

if command -v compute-sanitizer > /dev/null || [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  timeout 200 "$sanitizer" --tool memcheck --error-exitcode 3 "$here/tensor_test" \
      --gtest_filter='Backends/OpsTest.*/cuda_bf16:CudaDeviceTest.*' > "$out/memcheck.log" 2>&1 || status=1
  tail -5 "$out/memcheck.log"
  # Shared-memory races in the kernels that share tiles between warps (attention, sampling).
  timeout 90 "$sanitizer" --tool racecheck --error-exitcode 3 "$here/tensor_test" \
      --gtest_filter='Backends/OpsTest.PagedAttentionMatchesReferenceAcrossHeadSizesAndGroups/cuda_bf16:Backends/OpsTest.SampleIsAPureFunctionOfTheRowAndItsSeed/cuda_bf16' \
      > "$out/racecheck.log" 2>&1 || status=1
  tail -5 "$out/racecheck.log"
else
  echo "compute-sanitizer: not installed" | tee "$out/memcheck.log"
fi

if [[ -x "$here/cuda_op_bench" ]]; then
  "$here/cuda_op_bench" > "$out/cuda_op_bench.log" 2>&1 || status=1
  cat "$out/cuda_op_bench.log"
fi
exit $status
