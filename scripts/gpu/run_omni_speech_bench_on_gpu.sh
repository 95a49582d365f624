#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh, from the checkout's root (go.sh does
# both; issue 19, Qwen3-Omni speech output): the talker's CUDA cases of
# qwen3_omni_speech_reference_test (float32 against transformers, bfloat16 near it), then
# `omnistage serve --load-format dummy` of the released Qwen3-Omni-30B-A3B-Instruct shape
# (bench/shapes/qwen3-omni-30b-a3b: thinker, talker and code2wav, random weights made on the GPU)
# with the bundled qwen3_omni_moe deploy YAML under an overlay, and `omnistage bench serve` on
# /v1/chat/completions with modalities text,audio at each concurrency: prompts of --input-len
# words (~ as many tokens), --output-len thinker tokens (ignore_eos) and --frames codec frames from
# the talker (sampling_params_list[1]: max_tokens + ignore_eos, as random weights never end their
# speech; 12.5 frames a second of audio). The results: first-audio latency (TTFP), RTF, audio-s/s,
# TTFT and TPOT per concurrency (summarize_omni_speech_bench.py, also in summary.txt). Every part
# has a time limit; the logs and JSON results go to $OUT (or ./out) as omni_speech_<label>.tgz,
# packed after every part.
#
# --layout one (default): all three stages on GPU 0. Their bfloat16 weights take about 59 GiB
# (thinker with its towers, 31.7 B parameters), 6.2 GiB (talker, 3.3 B) and 0.4 GiB (code2wav),
# so an 80 GB H100 keeps about 12 GiB for CUDA contexts, KV caches and activations: the KV caches
# are sized explicitly (kv_cache_memory_bytes: --thinker-kv-gib, default 3, ~32k tokens;
# --talker-kv-gib, default 1), the step budget is 8192 tokens, and max_num_seqs 32 bounds the CUDA
# graphs. --layout two: the bundled YAML's placement (thinker on GPU 0, talker and code2wav on GPU 1)
# with the same sizes, for a two-GPU machine.
#
# The tokenizer: MOE_TOKENIZER_DIR (tokenizer.json and tokenizer_config.json with Qwen3-Omni's chat
# template, e.g. a `demo-model --arch qwen3_omni` folder), else `omnistage demo-model --arch
# qwen3_omni` is run here from the bundle's Qwen3 tokenizer, and its tokenizer files and
# generation_config.json are copied next to the shape's config.json.
#
#   scripts/gpu/bundle.sh --split omnistage tests/qwen3_omni_speech_reference_test
#   run tool: carry [".devrun/gpu-first"], command `mkdir -p /tmp/omnistage-parts && cp .devrun/gpu-first/* /tmp/omnistage-parts/`
#   run tool: carry [".devrun/gpu"], command
#     `OMNI_BUILD_SOURCE_DIR=<checkout path where it was built> bash .devrun/gpu/go.sh run_omni_speech_bench_on_gpu.sh`
#
#   bash run_omni_speech_bench_on_gpu.sh [--parts tests,bench] [--layout one|two]
#       [--concurrency "1 8 32"] [--input-len 100] [--output-len 100] [--frames 250]
#       [--thinker-kv-gib 3] [--talker-kv-gib 1] [--stage ID:KEY=VALUE ...] [--label NAME]
# --stage adds a field of stage ID to the overlay (e.g. 0:enforce_eager=true, 1:gpu_memory_utilization=0.1);
# --label names the results (default the layout).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$PWD"
out="${OUT:-$here/out}"
parts="tests,bench" layout=one concurrency="1 8 32" input_len=100 output_len=100 frames=250
thinker_kv_gib=3 talker_kv_gib=1 label="" stage_fields=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --parts) parts="$2"; shift ;;
    --layout) layout="$2"; shift ;;
    --concurrency) concurrency="$2"; shift ;;
    --input-len) input_len="$2"; shift ;;
    --output-len) output_len="$2"; shift ;;
    --frames) frames="$2"; shift ;;
    --thinker-kv-gib) thinker_kv_gib="$2"; shift ;;
    --talker-kv-gib) talker_kv_gib="$2"; shift ;;
    --stage) stage_fields+=("$2"); shift ;;
    --label) label="$2"; shift ;;
    *) echo "run_omni_speech_bench_on_gpu.sh: unknown argument '$1' (--parts, --layout, --concurrency, --input-len, --output-len, --frames, --thinker-kv-gib, --talker-kv-gib, --stage, --label)" >&2; exit 2 ;;
  esac
  shift
done
case "$layout" in
  one) talker_device=0 ;;
  two) talker_device=1 ;;
  *) echo "run_omni_speech_bench_on_gpu.sh: --layout $layout: allowed values are one, two" >&2; exit 2 ;;
esac
mkdir -p "$out"
source "$here/gpu_env.sh"
label="${label:-$layout}"
work="${WORK_DIR:-/tmp/omnistage-omni-speech}"
logs="$work/logs/omni_speech_$label"
rm -rf "$logs" && mkdir -p "$logs"
omni="$here/omnistage"
export OMNISTAGE_DEPLOY_DIR="$here/deploy"
status=0
want() { [[ ",$parts," == *",$1,"* ]]; }
section() {
  tar czf "$out/omni_speech_$label.tgz" -C "$work/logs" "omni_speech_$label"
  echo "=== $1 ($(date -u +%T), ${SECONDS}s)"
}
# The tests find tests/data through the source path they were built in (OMNI_BUILD_SOURCE_DIR,
# that path on the build machine): it is made a link to this checkout when it does not exist here.
source_dir="${OMNI_BUILD_SOURCE_DIR:-}"
if [[ -n "$source_dir" && ! -e "$source_dir/tests/data" ]]; then
  mkdir -p "$(dirname "$source_dir")" && ln -sfn "$root" "$source_dir"
fi

if want tests; then
  section "qwen3_omni_speech_reference_test: the talker on CUDA"
  if [[ -x "$here/qwen3_omni_speech_reference_test" ]]; then
    timeout 120 "$here/qwen3_omni_speech_reference_test" --gtest_filter='*Cuda*' > "$logs/speech_reference_cuda.log" 2>&1 || status=1
    grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[ +OK \]|Failure|Expected|Which is" "$logs/speech_reference_cuda.log" | head -30
  else
    echo "not in the bundle (bundle.sh ... tests/qwen3_omni_speech_reference_test)"
  fi
fi

if want bench; then
  shape="${OMNI_SPEECH_SHAPE_DIR:-$root/bench/shapes/qwen3-omni-30b-a3b}"
  model="$work/model"
  rm -rf "$model" && mkdir -p "$model"
  cp "$shape/config.json" "$shape/preprocessor_config.json" "$model/" || { section failed; exit 1; }
  if [[ -n "${MOE_TOKENIZER_DIR:-}" ]]; then
    cp "$MOE_TOKENIZER_DIR"/tokenizer{,_config}.json "$model/" || { section failed; exit 1; }
    [[ -f "$MOE_TOKENIZER_DIR/generation_config.json" ]] && cp "$MOE_TOKENIZER_DIR/generation_config.json" "$model/"
  else
    section "demo-model --arch qwen3_omni (for its tokenizer files)"
    timeout 120 "$omni" demo-model --arch qwen3_omni --out "$work/demo" --tokenizer-from "$here/tokenizer" \
        > "$logs/demo_model.log" 2>&1 || { tail -5 "$logs/demo_model.log"; section failed; exit 1; }
    cp "$work/demo"/tokenizer{,_config}.json "$work/demo/generation_config.json" "$model/"
  fi
  ls -la "$model" > "$logs/model_files.log"

  gib=$((1 << 30))
  cat > "$logs/deploy.yaml" << EOF
base_config: $here/deploy/qwen3_omni_moe.yaml
stages:
  - stage_id: 0
    devices: "0"
    max_num_seqs: 32
    max_num_batched_tokens: 8192
    max_model_len: 4096
    gpu_memory_utilization: $([[ $layout == one ]] && echo 0.82 || echo 0.9)
    kv_cache_memory_bytes: $((thinker_kv_gib * gib))
  - stage_id: 1
    devices: "$talker_device"
    max_num_seqs: 32
    max_num_batched_tokens: 8192
    max_model_len: 8192
    gpu_memory_utilization: $([[ $layout == one ]] && echo 0.12 || echo 0.6)
    kv_cache_memory_bytes: $((talker_kv_gib * gib))
  - stage_id: 2
    devices: "$talker_device"
    max_num_seqs: 32
    gpu_memory_utilization: $([[ $layout == one ]] && echo 0.04 || echo 0.1)
EOF
  # --stage ID:KEY=VALUE fields go under their stage's entry (a second entry of the same stage_id
  # would be another stage).
  for f in "${stage_fields[@]}"; do
    id="${f%%:*}" kv="${f#*:}"
    python3 - "$logs/deploy.yaml" "$id" "${kv%%=*}" "${kv#*=}" << 'PY' || { section failed; exit 1; }
import sys
path, stage, key, value = sys.argv[1:]
lines = open(path).read().split("\n")
at = next(i for i, l in enumerate(lines) if l.strip() == f"- stage_id: {stage}")
end = next((i for i in range(at + 1, len(lines)) if lines[i].strip().startswith("- stage_id:") or not lines[i].strip()), len(lines))
lines.insert(end, f"    {key}: {value}")
open(path, "w").write("\n".join(lines))
PY
  done
  cat "$logs/deploy.yaml"
  "$omni" config "$model" --load-format dummy --deploy-config "$logs/deploy.yaml" > "$logs/config.log" 2>&1 ||
      { tail -5 "$logs/config.log"; section failed; exit 1; }

  port=8393
  section "serve (--layout $layout, --load-format dummy)"
  if ! serve_and_wait "$model" "$logs/serve.log" --load-format dummy --deploy-config "$logs/deploy.yaml"; then
    echo "the server did not come up"; kill "$server" 2> /dev/null; nvidia-smi >> "$logs/serve.log" 2>&1; section failed; exit 1
  fi
  grep -hE "KV budget|KV cache|max_model_len|talker on|predictor|decode steps|loaded|ready on" "$logs/serve.log" | tail -16
  nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv | tee "$logs/memory_after_load.log"
  extra="{\"sampling_params_list\": [{}, {\"max_tokens\": $frames, \"ignore_eos\": true}, {}]}"
  bench() {  # NAME TIMEOUT N C INPUT OUTPUT EXTRA [flags...]
    local name="$1" limit="$2" n="$3" c="$4" in="$5" outlen="$6" body="$7"
    shift 7
    timeout "$limit" "$omni" bench serve --base-url "http://127.0.0.1:$port" --model m --endpoint /v1/chat/completions \
        --modalities text,audio --voice ethan --num-prompts "$n" --max-concurrency "$c" --random-input-len "$in" \
        --random-output-len "$outlen" --ignore-eos --extra-body "$body" "$@" > "$logs/$name.log" 2>&1
  }
  section "warm-up"
  bench warmup 180 4 2 16 8 '{"sampling_params_list": [{}, {"max_tokens": 8, "ignore_eos": true}, {}]}'
  echo "warm-up: exit $?"
  grep -E "Successful|Failed|first failed" "$logs/warmup.log"
  for c in $concurrency; do
    n=$(( c < 4 ? 4 : (c < 16 ? 2 * c : c) ))
    section "bench serve c=$c n=$n (input $input_len, output $output_len tokens, $frames frames)"
    bench "bench_c$c" 240 "$n" "$c" "$input_len" "$output_len" "$extra" --metric-percentiles 50,99 \
        --result-file "$logs/bench_c$c.json" || status=1
    grep -E "Successful|Failed|first failed|Audio throughput|Mean TTFT|Mean TPOT|Mean TTFP|P99 TTFP|Mean RTF|Mean E2EL" \
        "$logs/bench_c$c.log"
  done
  kill -INT "$server" 2> /dev/null
  for _ in $(seq 1 20); do kill -0 "$server" 2> /dev/null || break; sleep 0.5; done
  kill -9 "$server" 2> /dev/null
  grep -h "per step" "$logs/serve.log" | tail -12
  python3 "$here/summarize_omni_speech_bench.py" "$logs" | tee "$logs/summary.txt"
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$logs/environment.log" 2>&1
cp "$out/environment.log" "$logs/" 2> /dev/null
section "done, status $status"
exit $status
