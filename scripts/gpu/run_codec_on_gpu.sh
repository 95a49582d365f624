#!/usr/bin/env bash
# Runs on the GPU machine from the folder scripts/gpu/bundle.sh packs: the audio-decoder ops on every
# backend (and under compute-sanitizer memcheck), the codec decoder on CUDA against the CPU
# (codec_gpu_test), and the codec decode speed at batch 1, 8 and 64 (codec_decoder_bench). Each part
# has its own time limit; logs go to $OUT (or ./out).
#
#   bash run_codec_on_gpu.sh
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
source "$here/gpu_env.sh"

status=0
ops='Backends/OpsTest.Conv*:Backends/OpsTest.SnakeBeta*:Backends/OpsTest.LayerNorm*:Backends/OpsTest.AddScaled*:Backends/OpsTest.PrependHistory*'
OMNI_OPS_TEST_REPORT=1 timeout 40 "$here/tensor_test" --gtest_filter="$ops" > "$out/audio_ops.log" 2>&1 || status=1
tail -3 "$out/audio_ops.log"
timeout 90 "$here/codec_gpu_test" > "$out/codec_gpu_test.log" 2>&1 || status=1
grep -E "^\[codec gpu\]|PASSED|FAILED|Failure" "$out/codec_gpu_test.log"
# Steady-state chunks of 25 frames, then one-frame first chunks (the first packets) before them.
for first in 25 1; do
  timeout 60 "$here/codec_decoder_bench" --device cuda:0 --frames 50 --first-chunk $first --chunk 25 --repeat 2 \
      --batch 1,8,64 --dir "$here/ckpt" >> "$out/codec_bench.log" 2>&1 || status=1
done
cat "$out/codec_bench.log"
# Where the GPU time goes (kernel summary), when Nsight Systems is installed.
nsys="$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2> /dev/null | head -1)"
if [[ -n "$nsys" ]]; then
  timeout 60 "$nsys" profile --stats=true --force-overwrite true -o "$here/codec_profile" "$here/codec_decoder_bench" \
      --device cuda:0 --frames 25 --first-chunk 25 --chunk 25 --repeat 1 --batch 8 --dir "$here/ckpt" \
      > "$out/nsys.log" 2>&1 || true
  grep -A25 "cuda_gpu_kern_sum" "$out/nsys.log" | head -30
fi
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [[ -x "$sanitizer" ]]; then
  timeout 30 "$sanitizer" --tool memcheck --error-exitcode 3 "$here/tensor_test" \
      --gtest_filter="${ops//:/\/cuda_f32:}/cuda_f32" > "$out/memcheck.log" 2>&1 || status=1
  tail -3 "$out/memcheck.log"
fi
exit $status
