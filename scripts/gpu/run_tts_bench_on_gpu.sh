#!/usr/bin/env bash
# Runs on the GPU machine from the folder scripts/gpu/bundle.sh packs (issue 9): writes a random-weight
# Qwen3-TTS checkpoint in the released talker shapes (--shape, default 1.7b) and codec decoder
# dims (--codec-shape, default released), serves it with the bundled qwen3_tts deploy YAML (both
# stages on GPU 0) under an overlay that sets the connector's decode_batch_max_size (--decode-batch,
# default 16: code2wav decodes that many streams per call), and runs
# `omnistage bench serve --endpoint /v1/audio/speech` at each concurrency with fixed-length outputs
# (max_new_tokens + ignore_eos). Every part has a time limit; logs and JSON results go to $OUT
# (or ./out) as tts_results_<label>.tgz, packed after every part.
#
#   bash run_tts_bench_on_gpu.sh [--shape 1.7b|0.6b] [--codec-shape released|small]
#       [--decode-batch N] [--concurrency "1 8 16 64"] [--frames 100]
#       [--stage ID:KEY=VALUE ...] [--label NAME]
# --stage adds a field of stage ID to the overlay (e.g. 0:code_predictor_frame_steps=true, or
# 1:devices=\"1\" for code2wav on the second GPU); --label names the results folder (default the
# shape).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
shape=1.7b codec_shape=released decode_batch=16 concurrency="1 8 16 64" frames=100 label="" stage_fields=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) shape="$2"; shift ;;
    --codec-shape) codec_shape="$2"; shift ;;
    --decode-batch) decode_batch="$2"; shift ;;
    --concurrency) concurrency="$2"; shift ;;
    --frames) frames="$2"; shift ;;
    --stage) stage_fields+=("$2"); shift ;;
    --label) label="$2"; shift ;;
    *) echo "run_tts_bench_on_gpu.sh: unknown argument '$1' (--shape, --codec-shape, --decode-batch, --concurrency, --frames, --stage, --label)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
source "$here/gpu_env.sh"
label="${label:-$shape}"
work="${WORK_DIR:-/tmp/omnistage-tts}"
# The logs stay on the machine; $OUT gets one archive of them (the run tool returns few files).
logs="$work/logs/tts_$label"
mkdir -p "$logs"
omni="$here/omnistage"
export OMNISTAGE_DEPLOY_DIR="$here/deploy"
section() {
  tar czf "$out/tts_results_$label.tgz" -C "$work/logs" "tts_$label"
  echo "=== $1 ($(date -u +%T), ${SECONDS}s)"
}

section "demo-model --shape $shape"
[[ -d "$work/model_$shape" ]] || timeout 120 "$omni" demo-model --arch qwen3_tts --shape "$shape" --codec-shape "$codec_shape" \
    --out "$work/model_$shape" --tokenizer-from "$here/tokenizer" > "$logs/demo_model.log" 2>&1 || { tail -5 "$logs/demo_model.log"; section failed; exit 1; }
du -sh "$work/model_$shape" | tee -a "$logs/demo_model.log"

section "serve (decode_batch_max_size $decode_batch)"
cat > "$logs/deploy.yaml" << EOF
base_config: $here/deploy/qwen3_tts.yaml
connectors:
  connector_of_shared_memory:
    extra:
      decode_batch_max_size: $decode_batch
EOF
if [[ ${#stage_fields[@]} -gt 0 ]]; then
  echo "stages:" >> "$logs/deploy.yaml"
  for id in 0 1; do
    fields=()
    for f in "${stage_fields[@]}"; do [[ "${f%%:*}" == "$id" ]] && fields+=("${f#*:}"); done
    [[ ${#fields[@]} -gt 0 ]] || continue
    printf '  - stage_id: %s\n' "$id" >> "$logs/deploy.yaml"
    for kv in "${fields[@]}"; do printf '    %s: %s\n' "${kv%%=*}" "${kv#*=}" >> "$logs/deploy.yaml"; done
  done
fi
cat "$logs/deploy.yaml"
port=8391
"$omni" serve "$work/model_$shape" --host 127.0.0.1 --port "$port" --served-model-name tts \
    --deploy-config "$logs/deploy.yaml" > "$logs/serve.log" 2>&1 &
server=$!
ready=0
get() { python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2> /dev/null; }
for _ in $(seq 1 180); do
  if get "http://127.0.0.1:$port/v1/models"; then ready=1; break; fi
  if ! kill -0 "$server" 2> /dev/null; then break; fi
  sleep 0.5
done
if [[ $ready -ne 1 ]]; then
  echo "the server did not come up"; tail -30 "$logs/serve.log"; kill "$server" 2> /dev/null; section failed; exit 1
fi
grep -h "talker on\|KV budget" "$logs/serve.log" | tail -3
# One short request warms up the allocator and the kernels before the measured runs.
timeout 60 "$omni" bench serve --base-url "http://127.0.0.1:$port" --model tts --endpoint /v1/audio/speech \
    --voice vivian --num-prompts 2 --max-concurrency 2 --random-output-len 8 --ignore-eos > "$logs/warmup.log" 2>&1
echo "warm-up: exit $?"

for c in $concurrency; do
  n=$(( c < 4 ? 4 : (c < 16 ? 2 * c : c) ))
  section "bench serve c=$c n=$n"
  timeout 60 "$omni" bench serve --base-url "http://127.0.0.1:$port" --model tts --endpoint /v1/audio/speech \
      --voice vivian --num-prompts "$n" --max-concurrency "$c" --random-input-len 16 --random-output-len "$frames" \
      --ignore-eos --metric-percentiles 50,99 --result-file "$logs/bench_c$c.json" > "$logs/bench_c$c.log" 2>&1
  echo "exit $?"
  grep -E "Successful|Failed|Audio throughput|Mean TTFP|P99 TTFP|Mean RTF|P99 RTF|Mean E2EL|P99 E2EL" "$logs/bench_c$c.log"
  sed -n '/Server time/,/=====/p' "$logs/bench_c$c.log"
done

kill -INT "$server" 2> /dev/null
for _ in $(seq 1 20); do kill -0 "$server" 2> /dev/null || break; sleep 0.5; done
kill -9 "$server" 2> /dev/null
grep -h "per step" "$logs/serve.log" | tail -20
section done
