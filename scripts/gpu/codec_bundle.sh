#!/usr/bin/env bash
# Bundles the codec decoder's GPU checks for the GPU machine (run_codec_on_gpu.sh): the op tests,
# codec_gpu_test and codec_decoder_bench, stripped, with the shared libraries the GPU machine lacks
# (as bundle.sh), packed into one archive. Run after `make build`.
#
#   scripts/gpu/codec_bundle.sh [build-dir] [archive]   (defaults: build, /work/main/.devrun/codec-cuda/bundle.tgz)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
archive="${2:-/work/main/.devrun/codec-cuda/bundle.tgz}"
stage="$(mktemp -d)/codec"
mkdir -p "$stage/lib" "$(dirname "$archive")"
for binary in "$build/tests/tensor_test" "$build/tests/codec_gpu_test" "$build/bench/codec_decoder_bench"; do
  [[ -x "$binary" ]] || { echo "codec_bundle.sh: $binary is missing; run make build first" >&2; exit 1; }
  cp "$binary" "$stage/"
  strip "$stage/$(basename "$binary")"
  ldd "$binary" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
      libcuda.so*|libcublas*|libcudart.so*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
done
cp "$root/scripts/gpu/run_codec_on_gpu.sh" "$root/scripts/gpu/gpu_env.sh" "$stage/"
tar czf "$archive" -C "$(dirname "$stage")" codec
rm -rf "$(dirname "$stage")"
ls -l "$archive"
