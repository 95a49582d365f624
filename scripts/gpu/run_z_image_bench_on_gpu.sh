#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh (binary: bench/z_image_bench), from the
# checkout's root: writes a random-weight Z-Image checkpoint in the released shapes (Qwen3-4B, the 6B
# S3-DiT, the FLUX.1 VAE decoder, bf16; what `demo-model --arch z_image --shape released` writes),
# then times 1024x1024 images at 8 steps without CFG (Z-Image-Turbo's settings) on the GPU in bf16
# (per-image stage durations; the first image is the warm-up; peak memory sampled by nvidia-smi,
# the whole process), twice: with CUDA graphs per step shape (the default) and with --enforce-eager
# (each step's ops launched one by one), so that one run gives the A/B; and, when the carried
# diffusers source tree is
# there (.devrun/peer/diffusers.tar.xz, or $Z_IMAGE_PEER: the repository's src/diffusers), diffusers' ZImagePipeline on
# the same checkpoint in the same run (scripts/reference/z_image_bench.py); after the single images
# both run one batched round per size of BATCHES (default "4,8": that many requests together,
# images per second). Logs go to $OUT.
#
#   bash .devrun/gpu/go.sh run_z_image_bench_on_gpu.sh [IMAGES [BATCHES]]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
source "$here/gpu_env.sh"
images="${1:-4}"
batches="${2:-4,8}"
ckpt=/tmp/z_image_released
status=0

# One omnistage run: $1 the log name (omnistage_$1_*), the rest extra z_image_bench flags.
run_omnistage() {
  local name="$1"
  shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/omnistage_${name}_gpu_memory.csv" &
  local sampler=$!
  timeout 400 "$here/z_image_bench" --model "$ckpt" --tokenizer-from "$here/tokenizer" --device cuda --dtype bfloat16 \
      --size 1024 --steps 8 --images "$images" --batches "$batches" "$@" \
      > "$out/omnistage_${name}_bench.json" 2> "$out/omnistage_${name}_bench.err" \
      || { status=1; tail -5 "$out/omnistage_${name}_bench.err"; }
  kill "$sampler"
  python3 - "$out/omnistage_${name}_bench.json" "$out/omnistage_${name}_gpu_memory.csv" "$name" << 'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
mem = [int(l) for l in open(sys.argv[2]) if l.strip().isdigit()]
per = [i["total_s"] for i in r["images"]]
steady = per[1:] or per
print(json.dumps({"engine": "omnistage", "run": sys.argv[3], "cuda_graphs": r.get("cuda_graphs"),
                  "graph_captures": r.get("graph_captures"), "graph_replays": r.get("graph_replays"),
                  "write_checkpoint_s": r.get("write_checkpoint_s"), "load_s": r["load_s"],
                  "per_image_s": per, "median_after_warmup_s": statistics.median(steady),
                  "median_denoise_after_warmup_s": statistics.median([i["denoise_s"] for i in r["images"][1:]] or [r["images"][0]["denoise_s"]]),
                  "last": r["images"][-1], "batched": r.get("batched"), "peak_gpu_mib": max(mem) if mem else None}))
PY
}

# The first run writes the checkpoint; both read it.
run_omnistage graphs
run_omnistage eager --enforce-eager

peer="${Z_IMAGE_PEER:-.devrun/peer/diffusers.tar.xz}"  # the diffusers tree's archive
if [[ -f "$peer" ]]; then
  mkdir -p /tmp/peer && tar xJf "$peer" -C /tmp/peer
  PYTHONUNBUFFERED=1 timeout 300 python3 "$here/z_image_bench.py" --diffusers /tmp/peer/src --model "$ckpt" --runs 3 --batches "$batches" \
      > "$out/diffusers_bench.json" 2> "$out/diffusers_bench.err" || { status=1; tail -8 "$out/diffusers_bench.err"; }
  cat "$out/diffusers_bench.json"
fi
exit $status
