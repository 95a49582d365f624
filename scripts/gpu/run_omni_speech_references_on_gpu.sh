#!/usr/bin/env bash
# Runs on the GPU machine from the checkout's root (needs torch and transformers 5, no GPU; issue
# 19): transformers' Qwen3OmniMoeCode2Wav on the code2wav fixture against its float64 reference
# (scripts/reference/qwen3_omni_code2wav_reference.py --check-transformers), then the tiny
# Qwen3-Omni speech reference (scripts/reference/qwen3_omni_speech_reference.py), whose folder
# comes back in $OUT/tiny_qwen3_omni_speech, and packed as $OUT/tiny_qwen3_omni_speech.tgz (unpack
# it into tests/data/ here). Logs go to $OUT (or ./out).
#
#   run tool, no carry: `bash scripts/gpu/run_omni_speech_references_on_gpu.sh`
set -uo pipefail
out="${OUT:-$PWD/out}"
mkdir -p "$out"
status=0
timeout 300 python3 scripts/reference/qwen3_omni_code2wav_reference.py \
    --check-transformers tests/data/tiny_qwen3_omni_code2wav > "$out/code2wav_transformers.log" 2>&1 || status=1
tail -5 "$out/code2wav_transformers.log"
timeout 400 python3 scripts/reference/qwen3_omni_speech_reference.py --out "$out/tiny_qwen3_omni_speech" \
    > "$out/speech_reference.log" 2>&1 || status=1
tail -30 "$out/speech_reference.log"
[[ -d "$out/tiny_qwen3_omni_speech" ]] && tar czf "$out/tiny_qwen3_omni_speech.tgz" -C "$out" tiny_qwen3_omni_speech
exit $status
