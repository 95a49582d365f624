#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh (issue 22): sleep mode on CUDA. Serves a
# random-weight Qwen3-8B shape and the Qwen3-TTS 1.7B demo with --enable-sleep-mode, and for each
# sleep level prints the GPU memory in use (nvidia-smi, whole device, and each stage process's own
# from --query-compute-apps) before, while asleep and after waking up, the seconds each sleep and
# wake-up took (the acks), and whether the greedy (TTS: seeded) outputs after waking up equal those
# before. Logs go to $OUT (or ./out)/sleep, packed into sleep_results.tgz.
#
#   bash run_sleep_on_gpu.sh [--only llm|tts]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
only=""
[[ "${1:-}" == "--only" ]] && only="$2"
source "$here/gpu_env.sh"
logs="$out/sleep"
mkdir -p "$logs"
work="${WORK_DIR:-/tmp/omnistage-bench}"
mkdir -p "$work"
omni="$here/omnistage"
export OMNISTAGE_DEPLOY_DIR="$here/deploy"
status=0
port=18123

gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
# The GPU memory (MiB) of each stage process of the server `$1`, "pid:MiB ...".
stage_used() {
  local pids
  pids=$(pgrep -P "$1" -f stage-worker | tr '\n' '|')
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', ' -v p="|${pids}" 'index(p, "|" $1 "|") { printf "%s:%s ", $1, $2 }'
}

post() { curl -sS --max-time 300 -H 'Content-Type: application/json' -d "$2" "http://127.0.0.1:$port$1"; }

cycle() {  # label stage-ids-json level outputs-function
  local label="$1" stages="$2" level="$3" outputs="$4"
  local before after asleep woke
  before=$($outputs)
  local used_awake; used_awake="$(gpu_used) MiB [$(stage_used "$server")]"
  asleep=$(post /v1/omni/sleep "{\"stage_ids\": $stages, \"level\": $level}")
  local used_asleep; used_asleep="$(gpu_used) MiB [$(stage_used "$server")]"
  woke=$(post /v1/omni/wakeup "{\"stage_ids\": $stages}")
  local used_woke; used_woke="$(gpu_used) MiB [$(stage_used "$server")]"
  after=$($outputs)
  local same=no
  [[ "$before" == "$after" && -n "$before" ]] && same=yes
  echo "$label level $level: awake $used_awake | asleep $used_asleep | woken $used_woke | outputs identical: $same" |
    tee -a "$logs/summary.txt"
  echo "  sleep: $asleep" | tee -a "$logs/summary.txt"
  echo "  wakeup: $woke" | tee -a "$logs/summary.txt"
  [[ $same == yes ]] || status=1
}

llm_outputs() {
  for i in 1 2 3 4; do
    post /v1/completions "{\"model\":\"m\",\"prompt\":[$i,22,333,4444,5555,666,77,8],\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
  done
}

tts_outputs() {
  for i in 1 2; do
    post /v1/audio/speech "{\"model\":\"m\",\"input\":\"Sleep mode sentence $i.\",\"voice\":\"vivian\",\"response_format\":\"pcm\",\"seed\":7,\"max_new_tokens\":40}" | sha256sum
  done
}

if [[ -z "$only" || "$only" == llm ]]; then
  echo "=== Qwen3-8B shape ($(date -u +%T))"
  [[ -d "$work/qwen3-8b" ]] || timeout 300 "$here/make_random_checkpoint" --shape qwen3-8b --out "$work/qwen3-8b" \
      > "$logs/make_qwen3-8b.log" 2>&1 || status=1
  cp "$here/tokenizer/"* "$work/qwen3-8b/" 2> /dev/null
  if serve_and_wait "$work/qwen3-8b" "$logs/serve_qwen3-8b.log" --enable-sleep-mode --device cuda --max-model-len 4096; then
    cycle qwen3-8b "[0]" 1 llm_outputs
    cycle qwen3-8b "[0]" 2 llm_outputs
    kill -TERM "$server"; wait "$server"
  else
    status=1
  fi
fi

if [[ -z "$only" || "$only" == tts ]]; then
  echo "=== Qwen3-TTS 1.7B ($(date -u +%T))"
  [[ -d "$work/model_1.7b" ]] || timeout 300 "$omni" demo-model --arch qwen3_tts --shape 1.7b --out "$work/model_1.7b" \
      --tokenizer-from "$here/tokenizer" > "$logs/demo_model.log" 2>&1 || status=1
  if serve_and_wait "$work/model_1.7b" "$logs/serve_tts.log" --enable-sleep-mode; then
    cycle qwen3-tts-1.7b "[0]" 1 tts_outputs        # the talker's KV cache
    cycle qwen3-tts-1.7b "[0, 1]" 2 tts_outputs     # both stages whole
    echo "  code2wav at level 1 (501 expected): $(post /v1/omni/sleep '{"stage_ids": [1], "level": 1}')" |
      tee -a "$logs/summary.txt"
    kill -TERM "$server"; wait "$server"
  else
    status=1
  fi
fi
tar czf "$out/sleep_results.tgz" -C "$out" sleep
exit $status
