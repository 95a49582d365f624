#!/usr/bin/env python3
"""A tiny random-weight Qwen2.5-Omni token2wav (DiT codes -> mel by flow matching, BigVGAN mel ->
waveform) and its outputs under transformers, for the C++ port (src/model/qwen2_5_omni/token2wav.h).

Builds transformers' Qwen2_5OmniToken2WavModel from a tiny Qwen2_5OmniToken2WavConfig (the released
structure: ECAPA conditioning, head-0 RoPE, look-ahead/look-backward block masks, AMP blocks with
anti-aliased SnakeBeta) in float32 on the CPU, re-draws every weight so activations are O(1), and
runs the sampler as Qwen2_5OmniToken2WavModel.forward does (10 points of the sway grid, guidance
0.5), recording the noise it draws. Then it checks itself: the mel is recomputed from the recorded
noise with the model's own RungeKutta4ODESolver, the resampling filters are compared with their
definition, one attention layer with head 0 rotated pair by pair, and the saved checkpoint is
reloaded and rerun. Any failed check exits non-zero with SELF-CHECK FAILED and what differed.

    python3 scripts/reference/qwen2_5_omni_token2wav_reference.py --out tests/data/tiny_qwen2_5_omni/token2wav

(torch and transformers 5, CPU only; about a minute) writes into --out:
  config.json          a Qwen2.5-Omni config.json holding token2wav_config as transformers writes it
  model.safetensors    token2wav.code2wav_dit_model.* and token2wav.code2wav_bigvgan_model.*, float32
  spk_dict.pt          torch.save of {"Chelsie": {"cond": [1, enc_emb_dim], "ref_mel": [1, T, mel_dim],
                       "bos_token": int}, "Ethan": {...}} (the released file's layout)
  codes.npy            int32 [n]: the talker codes (Chelsie's request)
  xvector.npy          float32 [enc_emb_dim], ref_mel.npy float32 [T, mel_dim]: Chelsie's conditioning
  time_points.npy      float32 [10]: the sway time grid
  noise.npy            float32 [M, mel_dim] (M = repeats * n): the sampler's initial state
  dit_input.npy        float32 [M, mel_dim], dit_time.npy float32 [1]: one ODE-function input
  dit_output.npy       float32 [2, M, mel_dim]: the DiT forward at that input (conditional, unconditional)
  dit_guided.npy       float32 [M, mel_dim]: cond + 0.5 (cond - uncond), the ODE function's value
  mel.npy              float32 [M, mel_dim]: the sampled mel, time-major (transformers' [1, mel_dim, M]
                       transposed)
  waveform.npy         float32 [M * hop]: BigVGAN of that mel (clamped)
  kaiser_filter.npy    float32 [12]: the anti-aliasing filter transformers registers (kaiser_sinc_filter1d)
  reference.json       versions, shapes and the self-checks' differences
"""
import argparse
import json
import math
import os
import sys

import numpy as np

SEED = 20261207
N_CODES = 11  # M = 22 frames: 6 DiT blocks of 4, the last one partial
REF_FRAMES = 30
DIT = dict(
    hidden_size=32, num_hidden_layers=4, num_attention_heads=4, head_dim=16, ff_mult=2, emb_dim=16, num_embeds=40,
    repeats=2, mel_dim=20, block_size=4, look_ahead_layers=[2], look_backward_layers=[0, 3],
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, max_position_embeddings=32768, dropout=0.1,
    enc_emb_dim=12, enc_dim=8, enc_channels=[16, 16, 16, 48], enc_kernel_sizes=[5, 3, 3, 1],
    enc_dilations=[1, 2, 3, 1], enc_attention_channels=8, enc_res2net_scale=2, enc_se_channels=8)
BIGVGAN = dict(mel_dim=20, upsample_initial_channel=32, upsample_rates=[5, 3, 2], upsample_kernel_sizes=[11, 7, 4],
               resblock_kernel_sizes=[3, 7], resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5]])
SAMPLING = dict(num_steps=10, guidance_scale=0.5, sway_coefficient=-1.0)
DIT_TIME = 0.3


def fail(message):
    print("SELF-CHECK FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as m
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniToken2WavConfig

    torch.manual_seed(SEED)
    torch.set_num_threads(4)
    out = args.out
    os.makedirs(out, exist_ok=True)
    report = {"torch": torch.__version__, "transformers": transformers.__version__, "checks": {}}
    if not transformers.__version__.startswith("5."):
        print(f"warning: written for transformers 5.17, running {transformers.__version__}", file=sys.stderr)

    config = Qwen2_5OmniToken2WavConfig(dit_config=dict(DIT), bigvgan_config=dict(BIGVGAN))
    model = m.Qwen2_5OmniToken2WavModel(config).float().eval()
    dit, vocoder = model.code2wav_dit_model, model.code2wav_bigvgan_model

    # O(1) activations: every weight uniform with std 1/sqrt(fan_in) (conv_post a tenth of that),
    # biases 0.02, the code table 1, SnakeBeta's log-space alpha/beta 0.1 (what
    # src/model/qwen2_5_omni/random_checkpoint.cc draws).
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("codec_embed.weight"):
                std = 1.0
            elif name.endswith((".alpha", ".beta")):
                std = 0.1
            elif p.dim() >= 2:
                std = 1.0 / math.sqrt(p[0].numel())
            else:
                std = 0.02
            if name.endswith("conv_post.weight"):
                std *= 0.1  # a waveform mostly inside the final clamp, so that the comparison sees it
            p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * std * math.sqrt(3.0))

    # The resampling filters against their definition.
    want = m.kaiser_sinc_filter1d(0.25, 0.3, 12).reshape(-1)
    for name, buf in model.named_buffers():
        if name.endswith("filter"):
            diff = (buf.reshape(-1) - want).abs().max().item()
            if diff > 1e-7:
                fail(f"{name} differs from kaiser_sinc_filter1d(0.25, 0.3, 12) by {diff}")
    np.save(os.path.join(out, "kaiser_filter.npy"), want.numpy().astype(np.float32))
    # The DiT's head-0 rotation, judged by what it does: one attention layer of the model against
    # the same layer written out with head 0 rotated pair by pair ((x[2i], x[2i+1]) turned by
    # p * theta^(-2i/d), the released weights' convention and the C++ port's), all keys visible.
    # transformers whose rotary layout mismatches its rotate function (#47328, fixed by #47403)
    # give something else; refuse to write a reference of that.
    layer = dit.transformer_blocks[0].attn
    probe = torch.randn(1, 8, DIT["hidden_size"], generator=gen)
    positions = torch.arange(8)[None]
    with torch.no_grad():
        cos, sin = dit.rotary_embed(probe, positions)
        got = layer(probe, position_embeddings=(cos, sin), attention_mask=torch.ones(1, 1, 8, 8, dtype=torch.bool))
        heads, hd = DIT["num_attention_heads"], DIT["head_dim"]
        q, k, v = (proj(probe).view(1, 8, heads, hd).transpose(1, 2) for proj in (layer.to_q, layer.to_k, layer.to_v))
        inv = 1.0 / (DIT["rope_parameters"]["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        angle = positions[0].float()[:, None] * inv[None]

        def pairwise(x):
            a, b = x[..., 0::2], x[..., 1::2]
            return torch.stack((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1).flatten(-2)

        q, k = q.clone(), k.clone()
        q[:, :1], k[:, :1] = pairwise(q[:, :1]), pairwise(k[:, :1])
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1)
        want = layer.to_out[0]((weights @ v).transpose(1, 2).reshape(1, 8, heads * hd))
    rope_diff = (got - want).abs().max().item()
    report["checks"]["dit_head0_rope_is_pairwise"] = rope_diff
    if rope_diff > 1e-5:
        fail(f"this transformers' DiT attention is not head-0 pairwise RoPE (max diff {rope_diff}); use one with "
             "the #47403 fix (5.17)")

    codes = torch.randint(0, DIT["num_embeds"] + 1, (1, N_CODES), generator=gen)
    codes[0, 0], codes[0, -1] = 0, DIT["num_embeds"]  # both ends of the code table
    speakers = {}
    for i, (name, bos) in enumerate([("Chelsie", 151870), ("Ethan", 151871)]):
        speakers[name] = {"cond": torch.randn(1, DIT["enc_emb_dim"], generator=gen),
                          "ref_mel": torch.randn(1, REF_FRAMES + 3 * i, DIT["mel_dim"], generator=gen),
                          "bos_token": bos}
    chelsie = speakers["Chelsie"]
    frames = N_CODES * DIT["repeats"]

    # The sampler as Qwen2_5OmniToken2WavModel.forward runs it, with torch.randn recorded.
    drawn = []
    real_randn = torch.randn

    def recording_randn(*a, **k):
        t = real_randn(*a, **k)
        drawn.append(t.clone())
        return t

    torch.randn = recording_randn
    try:
        with torch.no_grad():
            mel_hf = dit.sample(chelsie["cond"], chelsie["ref_mel"], codes, **SAMPLING)  # [1, mel, M]
    finally:
        torch.randn = real_randn
    if len(drawn) != 1:
        fail(f"the sampler drew {len(drawn)} random tensors (expected 1)")
    noise = drawn[0][:, :frames]
    report["noise_drawn_shape"] = list(drawn[0].shape)
    if tuple(noise.shape) != (1, frames, DIT["mel_dim"]):
        fail(f"the recorded noise has shape {tuple(noise.shape)}")

    # The same mel from the recorded noise, through the model's own solver and time grid.
    time_points = torch.linspace(0, 1, SAMPLING["num_steps"], dtype=torch.float32)
    time_points += SAMPLING["sway_coefficient"] * (torch.cos(torch.pi / 2 * time_points) - 1 + time_points)
    spk = chelsie["cond"].unsqueeze(1).repeat(1, frames, 1)

    def ode(t, x):
        both = dit(hidden_states=x, condition_vector=chelsie["ref_mel"], speaker_embedding=spk, quantized_code=codes,
                   time_step=t, apply_cfg=True)
        cond, uncond = torch.chunk(both, 2, dim=0)
        return cond + (cond - uncond) * SAMPLING["guidance_scale"]

    with torch.no_grad():
        again = m.RungeKutta4ODESolver(function=ode, initial_value=noise).integrate(time_points)[-1]
    diff = (again.permute(0, 2, 1) - mel_hf).abs().max().item()
    report["checks"]["mel_from_recorded_noise"] = diff
    if diff > 1e-6:
        fail(f"the mel recomputed from the recorded noise differs by {diff}")

    # One ODE-function input: the noise at t = DIT_TIME.
    dit_time = torch.tensor(DIT_TIME, dtype=torch.float32)
    with torch.no_grad():
        dit_out = dit(hidden_states=noise, condition_vector=chelsie["ref_mel"], speaker_embedding=spk,
                      quantized_code=codes, time_step=dit_time, apply_cfg=True)  # [2, M, mel]
        guided = ode(dit_time, noise)
        wave = vocoder(mel_hf).reshape(-1)
    hop = int(np.prod(BIGVGAN["upsample_rates"]))
    if wave.numel() != frames * hop:
        fail(f"the waveform has {wave.numel()} samples, expected {frames * hop}")

    # The checkpoint in the released layout, reloaded and rerun.
    state = {"token2wav." + k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    for k in state:
        if not k.startswith(("token2wav.code2wav_dit_model.", "token2wav.code2wav_bigvgan_model.")):
            fail(f"unexpected weight name {k}")
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    token2wav_json = json.loads(config.to_json_string())
    full = {"architectures": ["Qwen2_5OmniModel"], "model_type": "qwen2_5_omni", "enable_audio_output": True,
            "token2wav_config": token2wav_json}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(full, f, indent=2)
        f.write("\n")
    torch.save(speakers, os.path.join(out, "spk_dict.pt"))
    reloaded = m.Qwen2_5OmniToken2WavModel(Qwen2_5OmniToken2WavConfig.from_dict(token2wav_json)).float().eval()
    loaded = load_file(os.path.join(out, "model.safetensors"))
    missing, unexpected = reloaded.load_state_dict({k[len("token2wav."):]: v for k, v in loaded.items()}, strict=False)
    if missing or unexpected:
        fail(f"reloading the checkpoint: missing {missing}, unexpected {unexpected}")
    spk_back = torch.load(os.path.join(out, "spk_dict.pt"), weights_only=True)
    if not torch.equal(spk_back["Chelsie"]["ref_mel"], chelsie["ref_mel"]):
        fail("spk_dict.pt does not read back")
    with torch.no_grad():
        out2 = reloaded.code2wav_dit_model(hidden_states=noise, condition_vector=chelsie["ref_mel"],
                                           speaker_embedding=spk, quantized_code=codes, time_step=dit_time,
                                           apply_cfg=True)
        wave2 = reloaded.code2wav_bigvgan_model(mel_hf).reshape(-1)
    report["checks"]["reloaded_dit"] = (out2 - dit_out).abs().max().item()
    report["checks"]["reloaded_bigvgan"] = (wave2 - wave).abs().max().item()
    if max(report["checks"]["reloaded_dit"], report["checks"]["reloaded_bigvgan"]) > 0:
        fail(f"the reloaded checkpoint computes differently: {report['checks']}")

    def save(name, value, dtype=np.float32):
        np.save(os.path.join(out, name + ".npy"), np.ascontiguousarray(value.detach().numpy().astype(dtype)))

    save("codes", codes[0], np.int32)
    save("xvector", chelsie["cond"][0])
    save("ref_mel", chelsie["ref_mel"][0])
    save("time_points", time_points)
    save("noise", noise[0])
    save("dit_input", noise[0])
    save("dit_time", dit_time.reshape(1))
    save("dit_output", dit_out)
    save("dit_guided", guided[0])
    save("mel", mel_hf[0].transpose(0, 1))
    save("waveform", wave)
    report.update({"frames": frames, "hop": hop, "mel_peak": mel_hf.abs().max().item(),
                   "waveform_peak": wave.abs().max().item(), "dit_output_peak": dit_out.abs().max().item()})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps(report, indent=2))
    if report["waveform_peak"] < 1e-3 or report["waveform_peak"] >= 1.0:
        print("warning: the waveform is nearly silent or clipped everywhere; the test is weaker", file=sys.stderr)


if __name__ == "__main__":
    main()
