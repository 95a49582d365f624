#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh (issue 22): `serve --api-server-count N`
# for N = 1, 2 and 4 under two frontend-heavy loads, with the same offered load each time:
#   chat:   a random-weight Qwen3-0.6B shape, chat requests of 2000 random words and 1 output token
#           (the frontends render the template and tokenize; the stage's prefill is short), run
#           twice per N: "cold" (the first pass, prefix cache empty) and "warm" (the same prompts again);
#   speech: the Qwen3-TTS 1.7B demo, 100-frame utterances encoded as mp3 by the frontends.
# Prints requests/s, latency and each frontend's request count (from /metrics) per run; logs and
# JSON results go to $OUT (or ./out)/frontends, packed into frontends_results.tgz.
#
#   bash run_frontends_on_gpu.sh [--counts "1 2 4"] [--concurrency 64] [--prompts 256]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
counts="1 2 4"
concurrency=64
prompts=256
while [[ $# -gt 0 ]]; do
  case "$1" in
    --counts) counts="$2"; shift ;;
    --concurrency) concurrency="$2"; shift ;;
    --prompts) prompts="$2"; shift ;;
    *) echo "run_frontends_on_gpu.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
source "$here/gpu_env.sh"
logs="$out/frontends"
mkdir -p "$logs"
work="${WORK_DIR:-/tmp/omnistage-bench}"
mkdir -p "$work"
omni="$here/omnistage"
export OMNISTAGE_DEPLOY_DIR="$here/deploy"
port=18125
status=0

per_frontend() {
  curl -sS --max-time 10 "http://127.0.0.1:$port/metrics" |
    awk '/^omnistage:api_server_requests_total\{/ { printf "%s ", $0 }'
}

bench() {  # label num-prompts extra-bench-flags...
  local label="$1" count="$2"
  shift 2
  timeout 240 "$omni" bench serve --base-url "http://127.0.0.1:$port" --model m --num-prompts "$count" \
      --max-concurrency "$concurrency" --seed 1 --metric-percentiles 50,99 --result-file "$logs/$label.json" "$@" \
      > "$logs/$label.log" 2>&1 || status=1
  echo "$label: $(grep -E 'Successful requests|Failed requests|Request throughput|Mean E2EL|P99 E2EL|Audio throughput' \
      "$logs/$label.log" | tr -s ' ' | tr '\n' ';')" | tee -a "$logs/summary.txt"
}

echo "=== chat, Qwen3-0.6B shape ($(date -u +%T))"
[[ -d "$work/qwen3-0.6b" ]] || timeout 120 "$here/make_random_checkpoint" --shape qwen3-0.6b --out "$work/qwen3-0.6b" \
    > "$logs/make_qwen3-0.6b.log" 2>&1 || status=1
cp "$here/tokenizer/"* "$work/qwen3-0.6b/" 2> /dev/null
for n in $counts; do
  if serve_and_wait "$work/qwen3-0.6b" "$logs/serve_chat_$n.log" --device cuda --max-model-len 4096 \
      --api-server-count "$n"; then
    chat=(--endpoint /v1/chat/completions --dataset-name random --random-input-len 2000 --random-output-len 1)
    bench "chat_N${n}_cold" "$prompts" "${chat[@]}"
    bench "chat_N${n}_warm" "$prompts" "${chat[@]}"
    echo "  per frontend: $(per_frontend)" | tee -a "$logs/summary.txt"
    kill -TERM "$server"; wait "$server"
  else
    status=1
  fi
done

echo "=== speech mp3, Qwen3-TTS 1.7B ($(date -u +%T))"
[[ -d "$work/model_1.7b" ]] || timeout 300 "$omni" demo-model --arch qwen3_tts --shape 1.7b --out "$work/model_1.7b" \
    --tokenizer-from "$here/tokenizer" > "$logs/demo_model.log" 2>&1 || status=1
for n in $counts; do
  if serve_and_wait "$work/model_1.7b" "$logs/serve_tts_$n.log" --api-server-count "$n"; then
    speech=(--endpoint /v1/audio/speech --voice vivian --random-input-len 16 --random-output-len 100 --ignore-eos
            --extra-request-body '{"response_format": "mp3"}')
    bench "speech_N${n}_warmup" 8 "${speech[@]}"
    bench "speech_N${n}" "$prompts" "${speech[@]}"
    echo "  per frontend: $(per_frontend)" | tee -a "$logs/summary.txt"
    kill -TERM "$server"; wait "$server"
  else
    status=1
  fi
done
tar czf "$out/frontends_results.tgz" -C "$out" frontends
exit $status
