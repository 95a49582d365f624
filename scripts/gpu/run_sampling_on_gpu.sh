#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh (optionally with a previous omnistage
# copied in as omnistage_before), in one go: the GPU tests
# of sampling and dtypes; seeded `generate` on CPU and CUDA (bf16, float16, float32); `serve
# --device cuda` answering /v1/completions and /v1/chat/completions (greedy and seeded, each twice,
# checked for equal answers); `bench throughput` on the Qwen3-0.6B shape, greedy and sampled
# (temperature 0.8, top-p 0.95); the load time of the Qwen3-8B shape, before and after. Each part
# has its own time limit; logs go to $OUT/sampling, packed into sampling_results.tgz after every part.
#
#   bash run_sampling_on_gpu.sh [--parts tests,generate,serve,throughput,load]   (default: all)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
parts="tests,generate,serve,throughput,load"
[[ "${1:-}" == "--parts" ]] && parts="$2"
want() { [[ ",$parts," == *",$1,"* ]]; }
source "$here/gpu_env.sh"
logs="$out/sampling"
mkdir -p "$logs"
work="${WORK_DIR:-/tmp/omnistage-sampling}"
mkdir -p "$work"
omni="$here/omnistage"
status=0
section() {
  tar czf "$out/sampling_results.tgz" -C "$out" sampling
  echo "=== $1 ($(date -u +%T), ${SECONDS}s)"
}
fail() { echo "FAIL: $*"; status=1; }

if want tests; then
section "gpu tests"
OMNI_TINY_QWEN_DIR="$here/tiny_qwen" timeout 60 "$here/model_gpu_test" \
    --gtest_filter='*Seeded*:*Float16*:*DeviceSampler*:*Greedy*:*Engine*' > "$logs/model_gpu_test.log" 2>&1 \
    || fail model_gpu_test
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$logs/model_gpu_test.log" | head -20
timeout 40 "$here/tensor_test" --gtest_filter='*Sample*' > "$logs/tensor_test_sample.log" 2>&1 || fail tensor_test
tail -1 "$logs/tensor_test_sample.log"
fi

if want generate; then
section "seeded generate: cpu vs cuda"
prompt=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
for model in qwen3_gqa2_tied_bf16_v5 qwen3_mha_untied_f32_v4; do
  args=(generate --model "$here/tiny_qwen/$model" --prompt-token-ids "$prompt" --max-tokens 24 --temperature 0.8
        --top-p 0.95 --top-k 50 --seed 7 --ignore-eos --num-gpu-blocks-override 8 --output json)
  timeout 20 "$omni" "${args[@]}" --device cpu > "$logs/gen_${model}_cpu.json" 2> "$logs/gen_${model}_cpu.err" || fail "cpu $model"
  for dtype in auto float16 float32; do
    timeout 20 "$omni" "${args[@]}" --device cuda --dtype "$dtype" > "$logs/gen_${model}_cuda_$dtype.json" \
        2> "$logs/gen_${model}_cuda_$dtype.err" || fail "cuda $dtype $model"
    if cmp -s "$logs/gen_${model}_cpu.json" "$logs/gen_${model}_cuda_$dtype.json"; then same=same; else same=DIFFERENT; fi
    echo "$model cuda $dtype vs cpu: $same"
  done
  head -c 300 "$logs/gen_${model}_cpu.json"; echo
  head -c 300 "$logs/gen_${model}_cuda_auto.json"; echo
done
timeout 20 "$omni" generate --model "$here/tiny_qwen/qwen3_gqa2_tied_bf16_v5" --prompt-token-ids 1,2 --dtype double \
    > /dev/null 2> "$logs/bad_dtype.err"
echo "bad --dtype: exit $? $(tail -1 "$logs/bad_dtype.err")"
fi

if want serve; then
section "serve --device cuda"
# The deploy configs (deploy/ of the repository) travel in the bundle.
export OMNISTAGE_DEPLOY_DIR="$here/deploy"
if timeout 60 "$omni" demo-model --arch qwen3 --out "$work/demo" --tokenizer-from "$here/tokenizer" \
    > "$logs/demo_model.log" 2>&1; then
  port=8191
  timeout 100 "$omni" serve "$work/demo" --device cuda --host 127.0.0.1 --port $port > "$logs/serve.log" 2>&1 &
  serve_pid=$!
  up=0
  for i in $(seq 1 60); do
    if curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 || curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null 2>&1; then up=1; break; fi
    sleep 1
  done
  echo "serve up after ${i}s: $up"
  post() {  # endpoint body file
    curl -s -m 20 "http://127.0.0.1:$port/v1/$1" -H 'Content-Type: application/json' -d "$2" > "$logs/$3" \
        || fail "curl $3"
    echo "$3: $(head -c 400 "$logs/$3")"
  }
  if [[ $up == 1 ]]; then
    for run in 1 2; do
      post completions '{"model": "'"$work/demo"'", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}' "completion_greedy_$run.json"
      post completions '{"model": "'"$work/demo"'", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.8, "top_p": 0.95, "seed": 11}' "completion_seeded_$run.json"
      post chat/completions '{"model": "'"$work/demo"'", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16, "temperature": 0.7, "seed": 5}' "chat_seeded_$run.json"
      post chat/completions '{"model": "'"$work/demo"'", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0, "logprobs": true, "top_logprobs": 2}' "chat_logprobs_$run.json"
    done
    python3 - "$logs" <<'PY' || status=1
import json, sys, os
d = sys.argv[1]
ok = True
def text(name):
    j = json.load(open(os.path.join(d, name)))
    c = j["choices"][0]
    return c.get("text") if "text" in c else c["message"]["content"], j
for base in ["completion_greedy", "completion_seeded", "chat_seeded", "chat_logprobs"]:
    a, ja = text(base + "_1.json")
    b, jb = text(base + "_2.json")
    same = a == b
    ok &= same and isinstance(a, str) and len(a) > 0
    print(f"{base}: {'same' if same else 'DIFFERENT'} answers, {ja['usage']['completion_tokens']} tokens: {a!r}")
lp = json.load(open(os.path.join(d, "chat_logprobs_1.json")))["choices"][0].get("logprobs")
ok &= bool(lp and lp.get("content") and len(lp["content"][0]["top_logprobs"]) == 2)
print("logprobs present:", bool(lp))
print("serve checks:", "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
  else
    fail "serve did not come up"
  fi
  kill $serve_pid 2> /dev/null
  wait $serve_pid 2> /dev/null
  tail -5 "$logs/serve.log"
else
  fail "demo-model"; tail -3 "$logs/demo_model.log"
fi
fi

if want throughput; then
section "bench throughput qwen3-0.6b, 256 concurrent"
timeout 60 "$here/make_random_checkpoint" --shape qwen3-0.6b --out "$work/qwen3-0.6b" > "$logs/make_0.6b.log" 2>&1 || fail make_0.6b
for mode in greedy sampled; do
  extra=()
  [[ $mode == sampled ]] && extra=(--temperature 0.8 --top-p 0.95)
  timeout 50 "$omni" bench throughput --model "$work/qwen3-0.6b" --device cuda --num-prompts 1024 --input-len 128 \
      --output-len 256 --max-num-seqs 256 "${extra[@]}" --output-json "$logs/throughput_$mode.json" \
      > "$logs/throughput_$mode.log" 2>&1 || fail "throughput $mode"
  echo "$mode: $(grep -E "Throughput" "$logs/throughput_$mode.log")"
done
fi

if want load; then
  section "load time qwen3-8b"
  timeout 100 "$here/make_random_checkpoint" --shape qwen3-8b --out "$work/qwen3-8b" > "$logs/make_8b.log" 2>&1 || fail make_8b
  ls -la "$work/qwen3-8b" | head; free -g | head -2
  load() {  # binary name
    timeout 60 "$1" generate --model "$work/qwen3-8b" --device cuda --prompt-token-ids 1,2,3 --max-tokens 2 \
        --temperature 0 --num-gpu-blocks-override 64 --output json > "$logs/load_$2.log" 2>&1 || fail "load $2"
    echo "$2: $(grep -o 'loaded .* in [0-9.]* s' "$logs/load_$2.log")"
  }
  [[ -x "$here/omnistage_before" ]] && load "$here/omnistage_before" before
  load "$omni" after
  load "$omni" after_again
  [[ -x "$here/file_read_bench" ]] && timeout 60 "$here/file_read_bench" "$work/qwen3-8b/model.safetensors" \
      2>&1 | tee "$logs/file_read_bench.log"
fi
section "done, status $status"
exit $status
