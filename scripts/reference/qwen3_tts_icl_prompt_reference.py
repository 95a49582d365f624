#!/usr/bin/env python3
"""The in-context (ICL) voice-clone prompt rows of the tiny Qwen3-TTS Base checkpoint, in float64.

Written from docs/models/qwen3_tts.md ("Voice cloning", the ICL layouts) over the weights of
tests/data/tiny_qwen3_tts_base/model.safetensors: the prompt of one request cloned in context from
the Base reference waveform, whose x-vector is tests/data/tiny_qwen3_tts_base/reference_xvector.npy
and whose codec frames are tests/data/tiny_qwen3_tts_speech_encoder/codes.npy (transformers'
MimiModel), with a transcript, in both text layouts:

  text track  T = [P(ref_text ids ++ text ids), tts_eos]     (P = text projection of the text embedding)
  codec track C = [C(bos), frame_sum(ref frame 0), ...]      (frame_sum = codebook-0 codec embedding
                                                              + the code predictor's embeddings of 1..15)
  after the usual role rows and codec-prefix rows (think, think_bos, language, think_eos, x-vector,
  pad; text track tts_pad ... tts_bos);
  streaming:     rows T[i] + C[i] for i < len(C) (T padded with tts_pad), decode-step text T[len(C):]
                 (or [tts_pad] when T is not longer);
  non-streaming: rows T[i] + C(pad), then C[j] + tts_pad; decode-step text [tts_pad].

Needs only numpy (runs anywhere: python3 qwen3_tts_icl_prompt_reference.py). Writes, next to the
Base checkpoint, prompt_icl_{streaming,non_streaming}.npy, trailing_icl_{...}.npy (float32) and the
request under "icl" in icl_reference.json.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_qwen3_tts as mt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "..", "..", "tests", "data", "tiny_qwen3_tts_base")
ENCODER = os.path.join(HERE, "..", "..", "tests", "data", "tiny_qwen3_tts_speech_encoder")
REQUEST = dict(text="Nice day.", ref_text="Hello there, a test.", language="English")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        begin, end = meta["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(meta["shape"])
    return out


def prompt(heads, tokenize, xvector, ref_codes, non_streaming):
    cfg, t = heads.cfg, heads.t
    ids = tokenize(f"<|im_start|>assistant\n{REQUEST['text']}<|im_end|>\n<|im_start|>assistant\n")
    role, text = ids[:3], ids[3:-5]
    ref = tokenize(f"<|im_start|>assistant\n{REQUEST['ref_text']}<|im_end|>\n")[3:-2]
    lang = t["codec_language_id"][REQUEST["language"].lower()]
    q = [t["codec_think_id"], t["codec_think_bos_id"], lang, t["codec_think_eos_id"], -1, t["codec_pad_id"],
         t["codec_bos_id"]]
    tts_pad, tts_bos, tts_eos = heads.project_text([cfg["tts_pad_token_id"], cfg["tts_bos_token_id"],
                                                    cfg["tts_eos_token_id"]])
    rows = list(heads.project_text(role))
    for j in range(len(q) - 1):
        rows.append((tts_pad if j < len(q) - 2 else tts_bos) + (xvector if q[j] == -1 else heads.codec(q[j])))
    text_track = list(heads.project_text(ref + text)) + [tts_eos]
    codec_track = [heads.codec(t["codec_bos_id"])] + [heads.frame_sum(frame) for frame in ref_codes]
    t1, t2 = len(text_track), len(codec_track)
    if non_streaming:
        rows += [x + heads.codec(t["codec_pad_id"]) for x in text_track]
        rows += [c + tts_pad for c in codec_track]
        trailing = [tts_pad]
    elif t1 > t2:
        rows += [text_track[i] + codec_track[i] for i in range(t2)]
        trailing = text_track[t2:]
    else:
        rows += [(text_track[i] if i < t1 else tts_pad) + codec_track[i] for i in range(t2)]
        trailing = [tts_pad]
    return np.stack(rows), np.stack(trailing), text, ref


def main():
    w = read_safetensors(os.path.join(BASE, "model.safetensors"))
    cfg = json.load(open(os.path.join(BASE, "config.json")))
    heads = mt.Heads(w, cfg)
    vocab, _, _, specials = mt.tokenizer_files()
    tokenize = lambda s: mt.ascii_tokenize(s, vocab, specials)  # noqa: E731
    xvector = np.load(os.path.join(BASE, "reference_xvector.npy")).astype(np.float64)
    codes = np.load(os.path.join(ENCODER, "codes.npy"))  # [16, frames]
    ref_codes = [[int(c) for c in frame] for frame in codes.T]
    out = dict(REQUEST, ref_codes="tiny_qwen3_tts_speech_encoder/codes.npy (frame-major: its transpose)",
               xvector="reference_xvector.npy", ref_frames=len(ref_codes))
    for name, non_streaming in (("streaming", False), ("non_streaming", True)):
        rows, trailing, text, ref = prompt(heads, tokenize, xvector, ref_codes, non_streaming)
        np.save(os.path.join(BASE, f"prompt_icl_{name}.npy"), rows.astype(np.float32))
        np.save(os.path.join(BASE, f"trailing_icl_{name}.npy"), trailing.astype(np.float32))
        out[name] = dict(rows=f"prompt_icl_{name}.npy", trailing=f"trailing_icl_{name}.npy",
                         num_rows=int(rows.shape[0]), num_trailing=int(trailing.shape[0]))
        out["text_ids"], out["ref_text_ids"] = [int(i) for i in text], [int(i) for i in ref]
        print(f"{name}: rows {rows.shape} trailing {trailing.shape}")
    with open(os.path.join(BASE, "icl_reference.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
