#!/usr/bin/env python3
"""Builds a tiny random-weight Qwen3-TTS *Base* checkpoint (voice cloning) and its reference outputs.

The talker is make_tiny_qwen3_tts.py's (same seed, same weights); this adds the speaker encoder of
a Base checkpoint in the released layout (`speaker_encoder.*`, ECAPA-TDNN with tiny channel
counts, `speaker_encoder_config` in config.json) and computes, as docs/models/qwen3_tts.md
("Voice cloning") describes it:
  - the speaker encoder's log-mel of a reference waveform (24 kHz): reflect padding by 384, STFT
    n_fft 1024 / hop 256 / periodic Hann, magnitude sqrt(re^2 + im^2 + 1e-9), Slaney mel
    filterbank (128 bands, 0..12 kHz), log(max(mel, 1e-5));
  - the x-vector of that mel, twice: transformers' Qwen2.5-Omni ECAPA_TimeDelayNet (the same
    module Qwen3-TTS copied) in float32, and a float64 implementation written from the document;
    the two must agree;
  - the x-vector-only clone of one request: the prompt rows (streaming text layout, Base's
    default) and the greedy generation (talker and sub-talker argmax, transformers' Qwen3Model as
    both stacks).

Output: DIR/tiny_qwen3_tts_base.tar.gz with tiny_qwen3_tts_base/ = the checkpoint, reference.json,
reference.wav (the waveform as float32 WAV), *.npy.

    python3 make_tiny_qwen3_tts_base.py --out DIR   # GPU machine (torch, transformers, numpy, safetensors)
"""
import argparse
import json
import os
import shutil
import struct
import sys
import tarfile
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_qwen3_tts as mt  # noqa: E402

SEED = 20261202
SAMPLE_RATE = 24000
N_FFT, HOP, WIN, N_MELS, FMIN, FMAX = 1024, 256, 1024, 128, 0.0, 12000.0
# Tiny ECAPA, structurally faithful: 5 entries (TDNN, 3 SE-Res2Net blocks, MFA = 3 x C), the released
# kernels and dilations, Res2Net scale 4 (chunks of 4 channels), x-vector width = the talker's hidden.
ENCODER = dict(mel_dim=N_MELS, enc_dim=mt.TALKER["hidden"], enc_channels=[16, 16, 16, 16, 48],
               enc_kernel_sizes=[5, 3, 3, 3, 1], enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=8,
               enc_res2net_scale=4, enc_se_channels=8, sample_rate=SAMPLE_RATE)
REQUEST = dict(name="base_clone", task="base", text="Nice day.", voice="", language="English", instructions="")
REFERENCE_SECONDS = 1.3


def encoder_weights(rng):
    e = ENCODER
    c = e["enc_channels"]
    w = {}

    def conv(name, n_out, n_in, k):
        w[f"speaker_encoder.{name}.weight"] = rng.normal(0.0, 1.0 / np.sqrt(n_in * k), size=(n_out, n_in, k)).astype(np.float32)
        w[f"speaker_encoder.{name}.bias"] = rng.normal(0.0, 0.1, size=n_out).astype(np.float32)

    conv("blocks.0.conv", c[0], e["mel_dim"], e["enc_kernel_sizes"][0])
    scale = e["enc_res2net_scale"]
    for i in range(1, len(c) - 1):
        conv(f"blocks.{i}.tdnn1.conv", c[i], c[i - 1], 1)
        for j in range(scale - 1):
            conv(f"blocks.{i}.res2net_block.blocks.{j}.conv", c[i] // scale, c[i] // scale, e["enc_kernel_sizes"][i])
        conv(f"blocks.{i}.tdnn2.conv", c[i], c[i], 1)
        conv(f"blocks.{i}.se_block.conv1", e["enc_se_channels"], c[i], 1)
        conv(f"blocks.{i}.se_block.conv2", c[i], e["enc_se_channels"], 1)
    conv("mfa.conv", c[-1], sum(c[1:-1]), e["enc_kernel_sizes"][-1])
    conv("asp.tdnn.conv", e["enc_attention_channels"], c[-1] * 3, 1)
    conv("asp.conv", c[-1], e["enc_attention_channels"], 1)
    conv("fc", e["enc_dim"], c[-1] * 2, 1)
    return w


def reference_waveform():
    rng = np.random.default_rng(SEED + 1)
    t = np.arange(int(REFERENCE_SECONDS * SAMPLE_RATE)) / SAMPLE_RATE
    x = 0.3 * np.sin(2 * np.pi * 220.0 * t) + 0.2 * np.sin(2 * np.pi * 1375.0 * t + 0.5) * (t / t[-1])
    x += 0.05 * rng.normal(size=t.shape)
    return np.clip(x, -1.0, 1.0).astype(np.float32)


def write_float_wav(path, samples, rate):
    data = samples.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE")
        f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt)
        f.write(b"data" + struct.pack("<I", len(data)) + data)


def slaney_mel_filterbank():
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) with its defaults (Slaney scale and area norm), float64."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fftfreqs = np.linspace(0, SAMPLE_RATE / 2, 1 + N_FFT // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(FMIN), hz_to_mel(FMAX), N_MELS + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    weights = np.zeros((N_MELS, 1 + N_FFT // 2))
    for i in range(N_MELS):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:N_MELS + 2] - mel_f[:N_MELS]))[:, None]
    return weights


def log_mel(torch, samples, basis):
    """[frames, 128] float64."""
    y = torch.from_numpy(samples.astype(np.float64))[None]
    pad = (N_FFT - HOP) // 2
    y = torch.nn.functional.pad(y[:, None], (pad, pad), mode="reflect")[:, 0]
    spec = torch.stft(y, N_FFT, hop_length=HOP, win_length=WIN, window=torch.hann_window(WIN, dtype=torch.float64),
                      center=False, onesided=True, return_complex=True)
    mag = torch.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    mel = torch.from_numpy(basis) @ mag[0]
    return torch.log(torch.clamp(mel, min=1e-5)).T.numpy()


def ecapa_float64(torch, w, mel):
    """The speaker encoder of docs/models/qwen3_tts.md in float64, over weights `w` (numpy)."""
    F = torch.nn.functional
    e = ENCODER
    W = {k[len("speaker_encoder."):]: torch.from_numpy(v.astype(np.float64)) for k, v in w.items()
         if k.startswith("speaker_encoder.")}

    def conv(name, x, dilation=1):
        weight = W[name + ".weight"]
        k = weight.shape[-1]
        total = dilation * (k - 1)
        if total:
            x = F.pad(x, (total // 2, total - total // 2), mode="reflect")
        return F.conv1d(x, weight, W[name + ".bias"], dilation=dilation)

    def tdnn(name, x, dilation=1):
        return torch.relu(conv(name, x, dilation))

    x = torch.from_numpy(mel.astype(np.float64)).T[None]  # [1, 128, T]
    x = tdnn("blocks.0.conv", x, e["enc_dilations"][0])
    outs = []
    scale = e["enc_res2net_scale"]
    for i in range(1, len(e["enc_channels"]) - 1):
        residual = x
        h = tdnn(f"blocks.{i}.tdnn1.conv", x)
        parts = torch.chunk(h, scale, dim=1)
        res = [parts[0]]
        prev = None
        for j in range(1, scale):
            inp = parts[j] if j == 1 else parts[j] + prev
            prev = tdnn(f"blocks.{i}.res2net_block.blocks.{j - 1}.conv", inp, e["enc_dilations"][i])
            res.append(prev)
        h = torch.cat(res, dim=1)
        h = tdnn(f"blocks.{i}.tdnn2.conv", h)
        s = h.mean(dim=2, keepdim=True)
        s = torch.sigmoid(conv(f"blocks.{i}.se_block.conv2", torch.relu(conv(f"blocks.{i}.se_block.conv1", s))))
        x = h * s + residual
        outs.append(x)
    x = tdnn("mfa.conv", torch.cat(outs, dim=1), e["enc_dilations"][-1])
    t = x.shape[-1]
    mean = x.mean(dim=2, keepdim=True)
    std = torch.sqrt(((x - mean) ** 2).mean(dim=2, keepdim=True).clamp(min=1e-12))
    att = torch.cat([x, mean.expand(-1, -1, t), std.expand(-1, -1, t)], dim=1)
    att = conv("asp.conv", torch.tanh(tdnn("asp.tdnn.conv", att)))
    att = torch.softmax(att, dim=2)
    wmean = (att * x).sum(dim=2, keepdim=True)
    wstd = torch.sqrt((att * (x - wmean) ** 2).sum(dim=2, keepdim=True).clamp(min=1e-12))
    pooled = torch.cat([wmean, wstd], dim=1)
    return conv("fc", pooled)[0, :, 0].numpy()


def ecapa_transformers(torch, w, mel):
    """transformers' Qwen2.5-Omni ECAPA_TimeDelayNet, float32, with the checkpoint's weights."""
    from types import SimpleNamespace

    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as m
    module = m.ECAPA_TimeDelayNet(SimpleNamespace(**ENCODER)).float().eval()
    state = {k[len("speaker_encoder."):]: torch.from_numpy(v) for k, v in w.items() if k.startswith("speaker_encoder.")}
    module.load_state_dict(state, strict=True)
    with torch.no_grad():
        return module(torch.from_numpy(mel.astype(np.float32))[None]).double().numpy()[0]


def streaming_prompt(req, heads, tokenize, xvector):
    """Base's default layout (streaming text): returns (rows, trailing text-track rows, codec prefix, tts_pad)."""
    cfg, t = heads.cfg, heads.t
    ids = tokenize(f"<|im_start|>assistant\n{req['text']}<|im_end|>\n<|im_start|>assistant\n")
    role, text = ids[:3], ids[3:-5]
    lang_id = t["codec_language_id"][req["language"].lower()]
    q = [t["codec_think_id"], t["codec_think_bos_id"], lang_id, t["codec_think_eos_id"], -1,
         t["codec_pad_id"], t["codec_bos_id"]]
    tts_pad, tts_bos, tts_eos = heads.project_text([cfg["tts_pad_token_id"], cfg["tts_bos_token_id"],
                                                    cfg["tts_eos_token_id"]])
    rows = list(heads.project_text(role))
    n = len(q)
    for j in range(n - 1):
        rows.append((tts_pad if j < n - 2 else tts_bos) + (xvector if q[j] == -1 else heads.codec(q[j])))
    projected = heads.project_text(text)
    rows.append(projected[0] + heads.codec(t["codec_bos_id"]))
    trailing = list(projected[1:]) + [tts_eos]
    return np.stack(rows), np.stack(trailing), text, q, tts_pad


def generate_streaming(rows, trailing, tts_pad, heads, talker_stack, predictor_stack):
    t = heads.t
    codec_head = heads.w["talker.codec_head.weight"]
    cp_heads = [heads.w[f"talker.code_predictor.lm_head.{g}.weight"] for g in range(mt.NUM_CODE_GROUPS - 1)]
    seq = list(rows)
    frames, generated, margins = [], [], []
    while len(frames) < mt.MAX_FRAMES:
        hidden = talker_stack(np.stack(seq))[-1]
        logits = mt.talker_logits_processors(hidden @ codec_head.T, generated, t)
        order = np.argsort(-logits, kind="stable")
        margins.append(float(logits[order[0]] - logits[order[1]]))
        code0 = int(order[0])
        generated.append(code0)
        if code0 == t["codec_eos_token_id"]:
            break
        codes = [code0]
        cp_seq = [hidden, heads.codec(code0)]
        for g in range(1, mt.NUM_CODE_GROUPS):
            h = predictor_stack(heads.mtp(np.stack(cp_seq)))[-1]
            lg = h @ cp_heads[g - 1].T
            o = np.argsort(-lg, kind="stable")
            margins.append(float(lg[o[0]] - lg[o[1]]))
            codes.append(int(o[0]))
            cp_seq.append(heads.cp_embed(g, codes[g]))
        k = len(frames)
        frames.append(codes)
        seq.append(heads.frame_sum(codes) + (trailing[k] if k < len(trailing) else tts_pad))
    return frames, generated, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import transformers
    from safetensors.numpy import save_file

    torch.set_num_threads(8)
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    custom = os.path.join(here, "..", "..", "tests", "data", "tiny_qwen3_tts")
    log = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "tiny_qwen3_tts_base")
        os.makedirs(root)
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(os.path.join(custom, name), os.path.join(root, name))
        vocab, _, _, specials = mt.tokenizer_files()
        cfg = mt.config_json(specials, vocab)
        cfg["tts_model_type"] = "base"
        cfg["talker_config"]["spk_id"] = {}
        cfg["talker_config"]["spk_is_dialect"] = {}
        cfg["speaker_encoder_config"] = ENCODER
        with open(os.path.join(root, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        w = mt.make_weights()
        w.update(encoder_weights(np.random.default_rng(SEED)))
        save_file(w, os.path.join(root, "model.safetensors"), metadata={"format": "pt"})

        def save(name, a):
            np.save(os.path.join(root, name), np.ascontiguousarray(np.asarray(a, dtype=np.float32)))

        wave = reference_waveform()
        write_float_wav(os.path.join(root, "reference.wav"), wave, SAMPLE_RATE)
        save("reference_waveform.npy", wave)
        basis = slaney_mel_filterbank()
        try:
            import torchaudio
            ta = torchaudio.functional.melscale_fbanks(n_freqs=1 + N_FFT // 2, f_min=FMIN, f_max=FMAX, n_mels=N_MELS,
                                                       sample_rate=SAMPLE_RATE, norm="slaney",
                                                       mel_scale="slaney").double().numpy().T
            log.append(f"mel filterbank vs torchaudio: max |diff| {np.abs(ta - basis).max():.3e}")
        except Exception as e:  # noqa: BLE001
            log.append(f"torchaudio filterbank unavailable: {e!r}")
        mel = log_mel(torch, wave, basis)
        save("reference_mel.npy", mel)
        x64 = ecapa_float64(torch, w, mel)
        save("reference_xvector.npy", x64)
        diff = None
        try:
            x32 = ecapa_transformers(torch, w, mel)
            save("reference_xvector_transformers.npy", x32)
            diff = float(np.abs(x64 - x32).max())
        except Exception as e:  # noqa: BLE001 -- the float64 reference still lands; the log says why
            log.append(f"transformers ECAPA_TimeDelayNet failed: {e!r}")
        log.append(f"mel {mel.shape} range [{mel.min():.3f}, {mel.max():.3f}]; x-vector |x| max {np.abs(x64).max():.3f}; "
                   f"float64 vs transformers float32 max |diff| {diff}")

        heads = mt.Heads(w, cfg)
        talker_stack = mt.hf_stack(w, mt.TALKER, "talker.model.")
        predictor_stack = mt.hf_stack(w, mt.PREDICTOR, "talker.code_predictor.model.")
        tok = lambda s: mt.ascii_tokenize(s, vocab, specials)  # noqa: E731
        rows, trailing, text_ids, prefix, tts_pad = streaming_prompt(REQUEST, heads, tok, x64)
        save("prompt_base_clone.npy", rows)
        save("trailing_base_clone.npy", trailing)
        frames, code0s, margins = generate_streaming(rows, trailing, tts_pad, heads, talker_stack, predictor_stack)
        ref = dict(encoder=ENCODER, waveform="reference_waveform.npy", wav="reference.wav", mel="reference_mel.npy",
                   xvector="reference_xvector.npy", xvector_transformers_max_diff=diff,
                   clone=dict(REQUEST, text_ids=[int(i) for i in text_ids], codec_prefix=prefix,
                              rows="prompt_base_clone.npy", trailing="trailing_base_clone.npy", frames=frames,
                              code0s=code0s, min_margin=min(margins)),
                   max_frames=mt.MAX_FRAMES, transformers_version=transformers.__version__,
                   torch_version=torch.__version__)
        with open(os.path.join(root, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        log.append(f"clone: text_ids={text_ids} frames={len(frames)} code0s={code0s} min_margin={min(margins):.3e}")
        log.append(f"files: {sorted(os.listdir(root))}")
        with open(os.path.join(root, "make_tiny_qwen3_tts_base.log"), "w") as f:
            f.write("\n".join(log) + "\n")
        with tarfile.open(os.path.join(args.out, "tiny_qwen3_tts_base.tar.gz"), "w:gz") as tar:
            tar.add(root, arcname="tiny_qwen3_tts_base")
    print("\n".join(log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
