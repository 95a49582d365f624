#!/usr/bin/env bash
# Runs on the GPU machine from a folder made by bundle.sh (binaries: tests/tensor_test, tests/z_image_test
# and, for the CLI check, omnistage), from the checkout's root: the image ops and the fused DiT ops on
# CUDA against the CPU (with compute-sanitizer memcheck on their small cases), Z-Image on
# CUDA against the diffusers reference of tests/data/tiny_z_image in float32 and bfloat16, and
# `omnistage generate --device cuda` from the reference's saved latents (each case's worst 8-bit
# channel difference against the reference image). Logs go to $OUT (or ./out).
#
#   bash .devrun/gpu/go.sh run_z_image_on_gpu.sh
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$here/out}"
mkdir -p "$out"
source "$here/gpu_env.sh"
data="$(pwd)/tests/data/tiny_z_image"
export OMNI_TINY_Z_IMAGE_DIR="$data"
status=0

"$here/tensor_test" --gtest_filter='*ImageOps*:*DitOps*' > "$out/image_ops.log" 2>&1 || status=1
tail -3 "$out/image_ops.log"
grep -E "FAILED|Failure|max diff|^\[dit_ops" "$out/image_ops.log" | head -40
# compute-sanitizer memcheck on the fused DiT kernels and the convolution's unfolding (small shapes).
if command -v compute-sanitizer > /dev/null; then
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$here/tensor_test" \
      --gtest_filter='*DitOpsCuda*:*ImageOpsCuda*Conv2d*:*ImageOpsCuda*GroupNorm*:*ImageOpsCuda*Elementwise*' \
      > "$out/memcheck.log" 2>&1 || status=1
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -3
fi
"$here/z_image_test" --gtest_filter='*ZImageCuda*' > "$out/z_image_cuda.log" 2>&1 || status=1
grep -E "^\[z_image|FAILED|OK \]" "$out/z_image_cuda.log"
tail -2 "$out/z_image_cuda.log"

# The CLI: every reference case through `omnistage generate --device cuda`, compared in Python (when
# the bundle has omnistage).
[[ -x "$here/omnistage" ]] || { echo "no omnistage in the bundle: generate not checked"; exit $status; }
for dtype in float32 bfloat16; do
  for name in plain cfg cfg1_truncated; do
    args=$(python3 - "$data" "$name" << 'PY'
import json, shlex, sys
ref = json.load(open(sys.argv[1] + "/reference.json"))
c = next(c for c in ref["cases"] if c["name"] == sys.argv[2])
a = ["--prompt", c["prompt"], "--height", str(c["height"]), "--width", str(c["width"]),
     "--num-inference-steps", str(c["num_inference_steps"]), "--guidance-scale", str(c["guidance_scale"]),
     "--max-sequence-length", str(c["max_sequence_length"])]
if c.get("negative_prompt") is not None:
    a += ["--negative-prompt", c["negative_prompt"]]
print(shlex.join(a))
PY
)
    png="$out/${name}_${dtype}.png"
    eval "\"$here/omnistage\" generate --model \"$data/checkpoint\" --device cuda --dtype $dtype $args \
        --latents \"$data/${name}_latents_init.npy\" --output-image \"$png\" --output json" \
        > "$out/generate_${name}_${dtype}.json" 2> "$out/generate_${name}_${dtype}.err" || { status=1; tail -3 "$out/generate_${name}_${dtype}.err"; }
    python3 - "$png" "$data/${name}_image.npy" "$dtype" "$name" << 'PY' || status=1
import sys
import numpy as np
from PIL import Image
got = np.asarray(Image.open(sys.argv[1]).convert("RGB")).astype(np.int32)
want = np.load(sys.argv[2]).astype(np.int32)
worst = int(np.abs(got - want).max())
# The bounds of z_image_test's CUDA cases: 1/255 in float32, 14/255 in bf16 (4-9 measured).
bound = 1 if sys.argv[3] == "float32" else 14
print(f"generate --device cuda --dtype {sys.argv[3]} {sys.argv[4]}: {got.shape[1]}x{got.shape[0]}, "
      f"max abs diff {worst} (bound {bound}), mean {np.abs(got - want).mean():.3f}")
sys.exit(0 if worst <= bound else 1)
PY
  done
done
rm -f "$out"/*.png
exit $status
