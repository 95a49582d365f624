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

# cuBLASLt comes from the machine: its CUDA toolkit, or the wheel torch ships with.
cublas_dir=""
for candidate in $(ldconfig -p | awk '/libcublasLt.so.13/ {print $NF}') /usr/local/cuda/lib64/libcublasLt.so.13 \
    /usr/local/cuda-13*/lib64/libcublasLt.so.13 \
    $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cu13/lib/libcublasLt.so.13 \
    $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cublas/lib/libcublasLt.so.13; do
  if [[ -f "$candidate" ]]; then cublas_dir="$(dirname "$candidate")"; break; fi
done
echo "libcublasLt.so.13 from: ${cublas_dir:-not found}" | tee "$out/environment.log"
export LD_LIBRARY_PATH="$here/lib${cublas_dir:+:$cublas_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  ldd "$here/tensor_test" | grep -E "not found|cublas|cudart" || true
} >> "$out/environment.log" 2>&1

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
