#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh, from the checkout's root (go.sh does
# both; issue 18, the Qwen3-Omni thinker's MoE on the device): the MoE GPU tests (the CUDA layer
# against the CPU's, the tiny thinker's graphs / eager / async tokens) and the rest of
# model_gpu_test, the thinker reference tests' CUDA cases (model_test), compute-sanitizer memcheck
# on the MoE kernels' tests, then `bench latency` (bench/latency_bench: the same command alone) of the released Qwen3-Omni-30B-A3B thinker shape
# (bench/shapes/qwen3-omni-30b-a3b-thinker, random weights made on the GPU: --load-format dummy)
# at batch 1, 8 and 64 (prompt 128: the prefill is one step of batch x 128 tokens), with CUDA graphs,
# with --enforce-eager and with --async-scheduling; the prefill of a chat with 10 s of audio, a
# 640x480 image and ~50 text tokens through the towers and the thinker (`omnistage bench latency
# --messages`: omnistage in the bundle, and MOE_TOKENIZER_DIR holding a Qwen3-Omni tokenizer.json
# and tokenizer_config.json with its chat template, e.g. `omnistage demo-model --arch qwen3_omni`'s);
# and transformers' eager thinker of the same shape as the peer (scripts/reference/
# qwen3_omni_thinker_bench.py). Each part has a time limit; logs go to $OUT (or ./out)/moe, packed
# into moe_results.tgz after every part.
#
#   scripts/gpu/bundle.sh --split omnistage bench/latency_bench tests/model_gpu_test tests/model_test tests/tensor_test
#   run tool: carry [".devrun/gpu"], command
#     `OMNI_BUILD_SOURCE_DIR=<checkout path where it was built> bash .devrun/gpu/go.sh run_moe_on_gpu.sh [--parts LIST]`
#     --parts: comma-separated of tests, memcheck, bench, eager, async, mm, peer (default: all)
#     --batches: bench latency batch sizes (default 1,8,64); --output-len (default 64)
#     --variants LIST: more bench binaries in the bundle (comma-separated names, e.g. builds with
#       another constant), each run like the graphs bench, filed as "...-graphs-NAME"
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$PWD"
out="${OUT:-$here/out}"
mkdir -p "$out"
parts="tests,memcheck,bench,eager,async,mm,peer" batches="1,8,64" output_len=64 variants=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --parts) parts="$2"; shift ;;
    --batches) batches="$2"; shift ;;
    --output-len) output_len="$2"; shift ;;
    --variants) variants="$2"; shift ;;
    *) echo "run_moe_on_gpu.sh: unknown argument '$1' (--parts LIST, --batches LIST, --output-len N)" >&2; exit 2 ;;
  esac
  shift
done
source "$here/gpu_env.sh"
logs="$out/moe"
mkdir -p "$logs"
bench="$here/latency_bench"  # `omnistage bench latency` without the media libraries
shape="${MOE_SHAPE_DIR:-$root/bench/shapes/qwen3-omni-30b-a3b-thinker}"
status=0
want() { [[ ",$parts," == *",$1,"* ]]; }
section() {
  tar czf "$out/moe_results.tgz" -C "$out" moe
  echo "=== $1 ($(date -u +%T), ${SECONDS}s)"
}
# The tests find tests/data through the source path they were built in (OMNI_BUILD_SOURCE_DIR,
# that path on the build machine): it is made a link to this checkout when it does not exist here.
source_dir="${OMNI_BUILD_SOURCE_DIR:-}"
if [[ -n "$source_dir" && ! -e "$source_dir/tests/data" ]]; then
  mkdir -p "$(dirname "$source_dir")" && ln -sfn "$root" "$source_dir"
fi

if want tests; then
  section "model_gpu_test"
  OMNI_TINY_QWEN_DIR="$here/tiny_qwen" timeout 150 "$here/model_gpu_test" > "$logs/model_gpu_test.log" 2>&1 || status=1
  grep -E "^  (bf16|f32) " "$logs/model_gpu_test.log" | tail -40
  grep -E "^\[  (FAILED|PASSED) |^\[ +OK \] (Moe|CudaMoe)" "$logs/model_gpu_test.log" | tail -30
  section "model_test CUDA cases"
  timeout 60 "$here/model_test" --gtest_filter='*Cuda*' > "$logs/model_test_cuda.log" 2>&1 || status=1
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[ +OK \]" "$logs/model_test_cuda.log" | tail -24
  if [[ -x "$here/tensor_test" ]]; then
    section "tensor_test image ops on CUDA"
    timeout 60 "$here/tensor_test" --gtest_filter='*ImageOpsCuda*' > "$logs/tensor_test_image_cuda.log" 2>&1 || status=1
    grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$logs/tensor_test_image_cuda.log" | tail -5
  fi
fi

if want memcheck; then
  section "compute-sanitizer memcheck: MoE tests"
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  timeout 90 "$sanitizer" --tool memcheck --error-exitcode 3 "$here/model_gpu_test" \
      --gtest_filter='MoeGpuTest.GroupPlaces*:MoeGpuTest.EightExperts*:MoeGpuTest.TiledProducts*:MoeGpuTest.Route*:MoeGpuTest.GroupedLinear*' \
      > "$logs/memcheck_moe.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$logs/memcheck_moe.log" | tail -5
  if [[ -x "$here/tensor_test" ]]; then  # the convolution the audio tower takes (stride 2)
    timeout 60 "$sanitizer" --tool memcheck --error-exitcode 3 "$here/tensor_test" \
        --gtest_filter='*ImageOpsCuda*Conv2d*' > "$logs/memcheck_conv2d.log" 2>&1 || status=1
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$logs/memcheck_conv2d.log" | tail -3
  fi
fi

run_latency() {  # label limit [flags...]
  local label="$1" limit="$2"
  shift 2
  section "bench latency $label"
  timeout "$limit" "$bench" latency --model "$shape" --load-format dummy --device cuda --input-len 128 \
      --output-len "$output_len" --batch-size "$1" --num-iters-warmup 1 --num-iters 2 \
      --output-json "$logs/latency_$label.json" "${@:2}" > "$logs/latency_$label.log" 2>&1 || status=1
  grep -v "^\[" "$logs/latency_$label.log" | tail -8
  grep -E "loaded|error|Error" "$logs/latency_$label.log" | head -3
}
want bench && run_latency qwen3-omni-30b-a3b-graphs 180 "$batches"
for variant in ${variants//,/ }; do
  bench="$here/$variant" run_latency "qwen3-omni-30b-a3b-graphs-$variant" 120 "$batches"
done
want eager && run_latency qwen3-omni-30b-a3b-eager 90 "1,8" --enforce-eager
want async && run_latency qwen3-omni-30b-a3b-async 90 "1,8" --async-scheduling

if want mm; then
  section "bench latency: multimodal prefill (omnistage)"
  mm=/tmp/omni-thinker-chat
  rm -rf "$mm" && mkdir -p "$mm"
  cp "$shape/config.json" "$shape/preprocessor_config.json" "$mm/"
  cp "${MOE_TOKENIZER_DIR:?MOE_TOKENIZER_DIR names the tokenizer files}"/tokenizer{,_config}.json "$mm/"
  python3 "$root/scripts/gpu/make_bench_media.py" --out "$mm/media" --seconds 10 --width 640 --height 480
  text="Listen to the recording and look at the picture. Describe what you hear and what you see in a few"
  text+=" sentences, say which of the two is louder or brighter and why you think so, and then add one more"
  text+=" sentence about how they could be related to each other."
  messages="[{\"role\":\"user\",\"content\":[{\"type\":\"audio_url\",\"audio_url\":\"$mm/media/audio.wav\"},"
  messages+="{\"type\":\"image_url\",\"image_url\":\"$mm/media/image.png\"},{\"type\":\"text\",\"text\":\"$text\"}]}]"
  timeout 240 "$here/omnistage" bench latency --model "$mm" --load-format dummy --device cuda \
      --output-len "$output_len" --batch-size "1,8" --num-iters-warmup 1 --num-iters 3 --messages "$messages" \
      --output-json "$logs/latency_multimodal.json" > "$logs/latency_multimodal.log" 2>&1 || status=1
  grep -v "^\[" "$logs/latency_multimodal.log" | tail -6
  grep -E "messages|error|Error" "$logs/latency_multimodal.log" | head -3
fi

if want peer; then
  section "transformers eager thinker (the peer)"
  timeout 420 python3 "$root/scripts/reference/qwen3_omni_thinker_bench.py" --model "$shape" --batch-sizes "$batches" \
      --input-len 128 --output-len 16 --out "$logs/hf_thinker.json" > "$logs/hf_thinker.log" 2>&1 || status=1
  grep -v Warning "$logs/hf_thinker.log" | tail -8
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$logs/environment.log" 2>&1
section "done, status $status"
exit $status
