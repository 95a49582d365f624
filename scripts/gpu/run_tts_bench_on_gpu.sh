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
# --clone icl|xvector makes it the voice-clone benchmark (issue 23): a Base checkpoint (demo-model
# --task base, with the speaker encoder and the speech-tokenizer encoder), --references WAV files
# of 3 to 10 s (distinct random audio at 24 kHz), and every request clones one of them in turn, in
# context with a transcript (icl) or from the x-vector alone; each concurrency runs twice, with the
# server's embedding and reference-code caches warm (cache) and with --speaker-embedding-cache-size
# 0 (nocache: every request runs the encoders).
#
#   bash run_tts_bench_on_gpu.sh [--shape 1.7b|0.6b] [--codec-shape released|small]
#       [--decode-batch N] [--concurrency "1 8 16 64"] [--frames 100]
#       [--stage ID:KEY=VALUE ...] [--label NAME] [--clone icl|xvector] [--references N]
# --stage adds a field of stage ID to the overlay (e.g. 0:code_predictor_frame_steps=true, or
# 1:devices=\"1\" for code2wav on the second GPU); --label names the results folder (default the
# shape).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
shape=1.7b codec_shape=released decode_batch=16 concurrency="1 8 16 64" frames=100 label="" stage_fields=()
clone="" references=8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) shape="$2"; shift ;;
    --codec-shape) codec_shape="$2"; shift ;;
    --decode-batch) decode_batch="$2"; shift ;;
    --concurrency) concurrency="$2"; shift ;;
    --frames) frames="$2"; shift ;;
    --stage) stage_fields+=("$2"); shift ;;
    --label) label="$2"; shift ;;
    --clone) clone="$2"; shift ;;
    --references) references="$2"; shift ;;
    *) echo "run_tts_bench_on_gpu.sh: unknown argument '$1' (--shape, --codec-shape, --decode-batch, --concurrency, --frames, --stage, --label, --clone, --references)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
source "$here/gpu_env.sh"
case "$clone" in
  "") task=custom_voice ;;
  icl | xvector) task=base ;;
  *) echo "run_tts_bench_on_gpu.sh: --clone $clone: allowed values are icl, xvector" >&2; exit 2 ;;
esac
label="${label:-$shape${clone:+_clone_$clone}}"
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

model="$work/model_${shape}_$task"
section "demo-model --shape $shape --task $task"
[[ -d "$model" ]] || timeout 180 "$omni" demo-model --arch qwen3_tts --shape "$shape" --codec-shape "$codec_shape" \
    --task "$task" --out "$model" --tokenizer-from "$here/tokenizer" > "$logs/demo_model.log" 2>&1 || { tail -5 "$logs/demo_model.log"; section failed; exit 1; }
du -sh "$model" | tee -a "$logs/demo_model.log"

# Voice cloning: `references` distinct random references of 3 to 10 s, and the bench flags that
# clone from them in turn.
voice_args=(--voice vivian)
warmup_prompts=2
if [[ -n "$clone" ]]; then
  python3 - "$logs/references" "$references" << 'PY' || { section failed; exit 1; }
import math, os, random, struct, sys, wave
folder, n = sys.argv[1], int(sys.argv[2])
os.makedirs(folder, exist_ok=True)
for i in range(n):
    seconds = 3.0 + 7.0 * i / max(n - 1, 1)
    rng = random.Random(i)
    f0 = rng.uniform(90, 260)
    with wave.open(os.path.join(folder, f"ref{i}.wav"), "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
        frames = bytearray()
        for t in range(int(seconds * 24000)):
            v = 0.3 * math.sin(2 * math.pi * f0 * t / 24000) * (0.6 + 0.4 * math.sin(t / 3000.0)) + 0.05 * rng.gauss(0, 1)
            frames += struct.pack("<h", max(-32767, min(32767, int(v * 32767))))
        w.writeframes(bytes(frames))
PY
  voice_args=()
  for f in "$logs"/references/ref*.wav; do voice_args+=(--ref-audio "$f"); done
  [[ "$clone" == icl ]] && voice_args+=(--ref-text "A short sentence read aloud in a calm voice, for cloning.")
  warmup_prompts=$references
  echo "references: $(ls "$logs/references" | wc -l) files, $(du -sh "$logs/references" | cut -f1)"
fi

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
get() { python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2> /dev/null; }
# start NAME [FLAG ...]: serves the model (log serve_NAME.log), waits for it and warms it up.
start() {
  local name="$1"; shift
  section "serve $name (decode_batch_max_size $decode_batch) $*"
  "$omni" serve "$model" --host 127.0.0.1 --port "$port" --served-model-name tts \
      --deploy-config "$logs/deploy.yaml" "$@" > "$logs/serve_$name.log" 2>&1 &
  server=$!
  local ready=0
  for _ in $(seq 1 180); do
    if get "http://127.0.0.1:$port/v1/models"; then ready=1; break; fi
    if ! kill -0 "$server" 2> /dev/null; then break; fi
    sleep 0.5
  done
  if [[ $ready -ne 1 ]]; then
    echo "the server did not come up"; tail -30 "$logs/serve_$name.log"; kill "$server" 2> /dev/null; section failed; exit 1
  fi
  grep -h "talker on\|KV budget" "$logs/serve_$name.log" | tail -3
  # Short requests warm up the allocator and the kernels (and, cloning, the caches) first.
  timeout 120 "$omni" bench serve --base-url "http://127.0.0.1:$port" --model tts --endpoint /v1/audio/speech \
      "${voice_args[@]}" --num-prompts "$warmup_prompts" --max-concurrency 2 --random-output-len 8 \
      --ignore-eos > "$logs/warmup_$name.log" 2>&1
  echo "warm-up: exit $?"
}
stop() {
  kill -INT "$server" 2> /dev/null
  for _ in $(seq 1 20); do kill -0 "$server" 2> /dev/null || break; sleep 0.5; done
  kill -9 "$server" 2> /dev/null
  grep -h "per step" "$logs/serve_$1.log" | tail -20
}
measure() {
  local name="$1" c="$2"
  local n=$(( c < 4 ? 4 : (c < 16 ? 2 * c : c) ))
  section "bench serve $name c=$c n=$n"
  timeout 90 "$omni" bench serve --base-url "http://127.0.0.1:$port" --model tts --endpoint /v1/audio/speech \
      "${voice_args[@]}" --num-prompts "$n" --max-concurrency "$c" --random-input-len 16 --random-output-len "$frames" \
      --ignore-eos --metric-percentiles 50,99 --result-file "$logs/bench_${name}_c$c.json" > "$logs/bench_${name}_c$c.log" 2>&1
  echo "exit $?"
  grep -E "Successful|Failed|Audio throughput|Mean TTFP|Median TTFP|P99 TTFP|Mean RTF|P99 RTF|Mean E2EL|P99 E2EL" "$logs/bench_${name}_c$c.log"
  sed -n '/Server time/,/=====/p' "$logs/bench_${name}_c$c.log"
}

# Cloning runs twice: the caches warm, then off (every request runs the encoders).
runs=(main)
[[ -n "$clone" ]] && runs=(cache nocache)
for run in "${runs[@]}"; do
  if [[ $run == nocache ]]; then start "$run" --speaker-embedding-cache-size 0; else start "$run"; fi
  for c in $concurrency; do measure "$run" "$c"; done
  stop "$run"
done
section done
