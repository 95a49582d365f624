#!/usr/bin/python3
"""Float64 reference of the Qwen3-Omni code2wav and a tiny checkpoint to run it on.

Written from docs/models/qwen3_omni.md ("Speech output: code2wav"), independently of the C++
decoder: plain numpy, float64, whole sequence, explicit zero padding for every causal
convolution. It shares the building blocks of the Qwen3-TTS codec decoder's reference
(qwen3_tts_codec_reference.py, beside this file), which the Omni code2wav is a variant of:
codes enter as the mean of one embedding per codebook (no residual-VQ projections, no pre_conv,
no projections around the transformer, whose width is the latent width), and every transposed
convolution of the decoder blocks is trimmed by k - stride on both sides, so F frames give
1920 F - 555 samples with the real rates.

    /usr/bin/python3 scripts/reference/qwen3_omni_code2wav_reference.py --out tests/data/tiny_qwen3_omni_code2wav

    python3 scripts/reference/qwen3_omni_code2wav_reference.py --check-transformers tests/data/tiny_qwen3_omni_code2wav

(on a machine with torch and transformers 5) runs transformers' Qwen3OmniMoeCode2Wav in float32 on
that fixture's weights and codes and prints its largest difference from waveform.npy.

--out writes:
  config.json         a Qwen3-Omni config.json with a tiny code2wav_config (as transformers 5
                      writes it: rope_parameters, no head_dim); no thinker or talker weights
  model.safetensors   code2wav.* weights in the released names, BF16 as released (the reference
                      computes with the BF16-rounded values)
  codes.npy           int32 [frames, 16], frame-major (the talker's frame order)
  waveform.npy        float32 [frames * 1920 - 555], the decoded, clamped waveform
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_tts_codec_reference as tts  # noqa: E402

CODE2WAV = {
    "codebook_size": 128,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "sliding_window": 8,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "max_position_embeddings": 8000,
    "rms_norm_eps": 1e-5,
    "layer_scale_initial_scale": 0.01,
    "num_quantizers": 16,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "decoder_dim": 32,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "codebook_dim": 512,
    "vector_quantization_hidden_dimension": 512,
    "semantic_codebook_size": 4096,
}
FRAMES = 24
SEED = 20261207


def tts_shaped(c):
    """The Qwen3-TTS decoder config whose shared parts have the code2wav's shapes."""
    return {
        "codebook_size": c["codebook_size"],
        "codebook_dim": 8,
        "latent_dim": c["hidden_size"],
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["hidden_size"] // c["num_attention_heads"],
        "sliding_window": c["sliding_window"],
        "rope_theta": c["rope_parameters"]["rope_theta"],
        "rms_norm_eps": c["rms_norm_eps"],
        "num_quantizers": c["num_quantizers"],
        "upsample_rates": c["upsample_rates"],
        "upsampling_ratios": c["upsampling_ratios"],
        "decoder_dim": c["decoder_dim"],
    }


def make_weights(c, rng):
    """The shared parts as the Qwen3-TTS reference makes them, renamed to code2wav.*, and the
    code embedding (one table of num_quantizers * codebook_size rows)."""
    w = {}
    for name, value in tts.make_weights(tts_shaped(c), rng).items():
        if name.startswith(("decoder.quantizer.", "decoder.pre_conv.")):
            continue
        if name.startswith("decoder.pre_transformer.") and ("input_proj" in name or "output_proj" in name):
            continue
        w["code2wav." + name[len("decoder."):]] = value
    rows = c["num_quantizers"] * c["codebook_size"]
    # The mean of 16 rows of std 2 has std 0.5.
    w["code2wav.code_embedding.weight"] = (2.0 * rng.standard_normal((rows, c["hidden_size"]))).astype(np.float32)
    return {k: bf16_round(v) for k, v in w.items()}


def bf16_round(x):
    """float32 -> the nearest BF16 value (ties to even), kept as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).reshape(x.shape)


def decode(codes, w, c):
    """codes int [frames, 16] -> waveform [frames * 1920 - 555] (for the real rates)."""
    codes = np.maximum(codes, 0)
    table = w["code2wav.code_embedding.weight"]
    offsets = np.arange(c["num_quantizers"]) * c["codebook_size"]
    x = table[codes + offsets[None, :]].mean(axis=1)  # [F, H]
    x = tts.transformer(x, w, tts_shaped(c), "code2wav.pre_transformer.", projections=False).T  # [H, F]
    for i, r in enumerate(c["upsampling_ratios"]):
        p = "code2wav.upsample.%d." % i
        x = tts.causal_trans_conv(x, w[p + "0.conv.weight"], w[p + "0.conv.bias"], r, trim_left=True)
        x = tts.convnext(x, w, p + "1.")
    x = tts.causal_conv(x, w["code2wav.decoder.0.conv.weight"], w["code2wav.decoder.0.conv.bias"])
    for i, r in enumerate(c["upsample_rates"]):
        p = "code2wav.decoder.%d.block." % (i + 1)
        x = tts.snake_beta(x, w[p + "0.alpha"], w[p + "0.beta"])
        x = tts.causal_trans_conv(x, w[p + "1.conv.weight"], w[p + "1.conv.bias"], r, trim_left=True)
        for u, dilation in enumerate((1, 3, 9)):
            pu = p + "%d." % (u + 2)
            y = tts.snake_beta(x, w[pu + "act1.alpha"], w[pu + "act1.beta"])
            y = tts.causal_conv(y, w[pu + "conv1.conv.weight"], w[pu + "conv1.conv.bias"], dilation=dilation)
            y = tts.snake_beta(y, w[pu + "act2.alpha"], w[pu + "act2.beta"])
            y = tts.causal_conv(y, w[pu + "conv2.conv.weight"], w[pu + "conv2.conv.bias"])
            x = x + y
    last = len(c["upsample_rates"]) + 1
    x = tts.snake_beta(x, w["code2wav.decoder.%d.alpha" % last], w["code2wav.decoder.%d.beta" % last])
    x = tts.causal_conv(x, w["code2wav.decoder.%d.conv.weight" % (last + 1)],
                        w["code2wav.decoder.%d.conv.bias" % (last + 1)])
    return np.clip(x[0], -1.0, 1.0)


def config_json(c):
    return {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "model_type": "qwen3_omni_moe",
        "enable_audio_output": True,
        "code2wav_config": dict(c),
    }


def check_transformers(fixture):
    import torch
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeCode2WavConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeCode2Wav
    from safetensors.torch import load_file

    with open(os.path.join(fixture, "config.json")) as f:
        config = Qwen3OmniMoeCode2WavConfig(**json.load(f)["code2wav_config"])
    model = Qwen3OmniMoeCode2Wav(config).float().eval()
    state = {k[len("code2wav."):]: v.float() for k, v in load_file(os.path.join(fixture, "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("code_offset" in m or "inv_freq" in m for m in missing), missing
    codes = torch.from_numpy(np.load(os.path.join(fixture, "codes.npy")).astype(np.int64)).T[None]  # [1, 16, F]
    with torch.no_grad():
        got = model(codes)[0, 0].numpy()
    want = np.load(os.path.join(fixture, "waveform.npy"))
    assert got.shape == want.shape, (got.shape, want.shape)
    print("transformers vs the float64 reference: max abs difference %.3g (peak %.3f)" %
          (np.abs(got - want).max(), np.abs(want).max()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out")
    parser.add_argument("--check-transformers", metavar="FIXTURE")
    args = parser.parse_args()
    if args.check_transformers:
        check_transformers(args.check_transformers)
        return
    if not args.out:
        parser.error("--out or --check-transformers is required")
    rng = np.random.default_rng(SEED)
    weights = make_weights(CODE2WAV, rng)
    codes = rng.integers(0, CODE2WAV["codebook_size"], size=(FRAMES, CODE2WAV["num_quantizers"]), dtype=np.int32)
    codes[3, :] = 0
    wave = decode(codes, {k: v.astype(np.float64) for k, v in weights.items()}, CODE2WAV)
    assert wave.shape == (FRAMES * 1920 - 555,), wave.shape
    os.makedirs(args.out, exist_ok=True)
    tts.write_safetensors(os.path.join(args.out, "model.safetensors"), weights, dtype="BF16")
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config_json(CODE2WAV), f, indent=2)
        f.write("\n")
    np.save(os.path.join(args.out, "codes.npy"), codes)
    np.save(os.path.join(args.out, "waveform.npy"), wave.astype(np.float32))
    clipped = np.mean(np.abs(wave) >= 1.0)
    print("frames %d, samples %d, max |x| %.3f, rms %.3f, clipped %.1f%%" %
          (FRAMES, wave.size, np.abs(wave).max(), math.sqrt(np.mean(wave ** 2)), 100 * clipped))


if __name__ == "__main__":
    main()
