#!/usr/bin/env bash
# Bundles GPU test and benchmark binaries for the GPU machine: the binaries (op tests, model/engine
# tests, omnistage, the random checkpoint writer), the tiny reference checkpoints, the shared libraries
# they load that the GPU machine lacks (ldd; system, CUDA driver and cuBLAS libraries stay: the
# GPU machine has its own CUDA 13), and run_on_gpu.sh. Run on the build machine after
# `make build`; then carry the destination folder to the GPU machine and run run_on_gpu.sh (ops) or
# run_engine_on_gpu.sh (model, engine, benchmarks against transformers) there.
#
#   scripts/gpu/bundle.sh [build-dir] [destination]   (defaults: build, /work/main/.devrun/cuda)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
dest="${2:-/work/main/.devrun/cuda}"
binaries=("$build/tests/tensor_test" "$build/tests/model_gpu_test" "$build/omnistage" "$build/bench/make_random_checkpoint")
[[ -x "$build/bench/cuda_op_bench" ]] && binaries+=("$build/bench/cuda_op_bench")
# Tensor parallelism (tp_check.sh): the NCCL test.
[[ -x "$build/tests/nccl_communicator_test" ]] && binaries+=("$build/tests/nccl_communicator_test")

rm -rf "$dest"
mkdir -p "$dest/lib"
for binary in "${binaries[@]}"; do
  [[ -x "$binary" ]] || { echo "bundle.sh: $binary is missing; run make build first" >&2; exit 1; }
  cp "$binary" "$dest/"
  # Libraries the GPU machine's Ubuntu 24.04 + CUDA 13 image provides itself are left out.
  ldd "$binary" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
      libcuda.so*|libcublas*|libcudart.so*) ;;
      *) cp -L "$lib" "$dest/lib/" ;;
    esac
  done
done
cp "$root/scripts/gpu/run_on_gpu.sh" "$root/scripts/gpu/run_engine_on_gpu.sh" "$root/scripts/gpu/tp_check.sh" "$root/scripts/gpu/gpu_env.sh" \
   "$root/scripts/gpu/summarize_bench.py" "$root/scripts/reference/hf_generate_bench.py" "$dest/"
cp "$root/scripts/gpu/run_decode_graphs_on_gpu.sh" "$dest/"
# The tiny checkpoints the model tests compare against (model_gpu_test reads OMNI_TINY_QWEN_DIR).
cp -r "$root/tests/data/tiny_qwen" "$dest/"
du -sh "$dest"
ls "$dest" "$dest/lib"
