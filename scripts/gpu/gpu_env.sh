# Sourced by the run_*_on_gpu.sh scripts on the GPU machine: finds the machine's cuBLASLt (its CUDA
# toolkit, or the wheel torch ships with) and puts it and the bundle's lib/ on LD_LIBRARY_PATH.
# Expects $here (the bundle folder) and $out (the log folder) to be set.
cublas_dir=""
for candidate in $(ldconfig -p | awk '/libcublasLt.so.13/ {print $NF}') /usr/local/cuda/lib64/libcublasLt.so.13 \
    /usr/local/cuda-13*/lib64/libcublasLt.so.13 \
    $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cu13/lib/libcublasLt.so.13 \
    $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cublas/lib/libcublasLt.so.13; do
  if [[ -f "$candidate" ]]; then cublas_dir="$(dirname "$candidate")"; break; fi
done
echo "libcublasLt.so.13 from: ${cublas_dir:-not found}" | tee "$out/environment.log"
export LD_LIBRARY_PATH="$here/lib${cublas_dir:+:$cublas_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# lib/ holds Debian's libcurl and OpenSSL for omnistage's Hub client; the machine's own curl, which
# the scripts call, must keep the machine's libraries.
curl() { env -u LD_LIBRARY_PATH curl "$@"; }
export -f curl
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nproc
  uname -r
} >> "$out/environment.log" 2>&1

# Starts `$omni serve MODEL` on 127.0.0.1:$port in the background (pid in $server) with the
# extra flags, logging to LOG, and waits until it is ready (0) or has died or taken 300 s (1, with
# the log's tail). Usage: serve_and_wait MODEL LOG [flags...]; the caller sets $omni and $port.
serve_and_wait() {
  local model="$1" log="$2"
  shift 2
  "$omni" serve "$model" --host 127.0.0.1 --port "$port" --served-model-name m "$@" > "$log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    grep -q "ready on http" "$log" && return 0
    kill -0 "$server" 2> /dev/null || { tail -20 "$log"; return 1; }
    sleep 0.5
  done
  tail -20 "$log"
  return 1
}
