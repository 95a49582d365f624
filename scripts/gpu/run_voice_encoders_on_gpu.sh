#!/usr/bin/env bash
# Runs on the GPU machine from the folder scripts/gpu/bundle.sh packs: the audio encoders' ops and
# add_row_scaled on CUDA against the CPU (tensor_test, the encoders' ops also under
# compute-sanitizer memcheck), the speaker encoder and the speech-tokenizer encoder on CUDA against
# the references and the CPU, the codec decoders (Qwen3-TTS's, a copied stream, the Qwen3-Omni
# code2wav) on CUDA (codec_gpu_test), then the voice-clone benchmark in context and from the x-vector
# (run_tts_bench_on_gpu.sh --clone, its other arguments passed on). Logs go to $OUT (or ./out).
#
#   bash run_voice_encoders_on_gpu.sh [--concurrency "1 64"] [...]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
source "$here/gpu_env.sh"

status=0
timeout 60 "$here/tensor_test" --gtest_filter='AudioEncoderOps*:*AddRowScaled*:*Rotary*' > "$out/audio_encoder_ops.log" 2>&1 || status=1
tail -3 "$out/audio_encoder_ops.log"
timeout 120 "$here/codec_gpu_test" --gtest_filter='VoiceEncodersGpu.*:CodecDecoderGpuTest.*:Code2WavGpuTest.*' > "$out/voice_encoders_gpu.log" 2>&1 || status=1
grep -E "OK|PASSED|FAILED|Failure|Expected|Which is|mismatch" "$out/voice_encoders_gpu.log" | head -30
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [[ -x "$sanitizer" ]]; then
  timeout 90 "$sanitizer" --tool memcheck --error-exitcode 3 "$here/tensor_test" \
      --gtest_filter='AudioEncoderOpsCuda.*' > "$out/memcheck.log" 2>&1 || status=1
  tail -3 "$out/memcheck.log"
fi
for clone in icl xvector; do
  bash "$here/run_tts_bench_on_gpu.sh" --shape 1.7b --clone "$clone" "$@" || status=1
done
exit $status
