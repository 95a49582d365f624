#!/usr/bin/python3
"""Float64 reference of the Qwen3-TTS 12 Hz codec decoder and a tiny checkpoint to run it on.

Written from docs/models/qwen3_tts.md ("The codec decoder": the speech_tokenizer config, the
stages and their building blocks), independently of the C++ decoder: plain numpy, float64, whole-sequence (non-streaming)
computation with explicit zero padding for every causal convolution.

    /usr/bin/python3 scripts/reference/qwen3_tts_codec_reference.py --out tests/data/tiny_qwen3_tts_codec

writes into --out:
  speech_tokenizer/config.json        the real config layout, tiny decoder dims (see TINY below)
  speech_tokenizer/model.safetensors  decoder.* weights in the real names, F32 (written by hand:
                                      8-byte header length, JSON header, raw little-endian data)
  codes.npy                           int32 [frames, 16], frame-major (the talker's frame order)
  waveform.npy                        float32 [frames * 1920], the decoded, clamped waveform

The weights are random but scaled so that activations stay O(1) and the waveform is mostly
inside (-1, 1), so the clamp does not hide the values. The sliding window is small (8) so that a
short fixture still exercises it; upsample_rates [8, 5, 4, 3] and upsampling_ratios [2, 2] are the
real ones, so one frame is 1920 samples.
"""
import argparse
import json
import math
import os
import struct

import numpy as np

TINY = {
    "codebook_size": 2048,
    "codebook_dim": 8,
    "latent_dim": 16,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "sliding_window": 8,
    "rope_theta": 10000.0,
    "max_position_embeddings": 8000,
    "rms_norm_eps": 1e-5,
    "layer_scale_initial_scale": 0.01,
    "num_quantizers": 16,
    "num_semantic_quantizers": 1,
    "semantic_codebook_size": 4096,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "decoder_dim": 32,
    "hidden_act": "silu",
    "attention_bias": False,
}
FRAMES = 24
SEED = 20261129


# ---------------------------------------------------------------------------------------------
# Checkpoint


def make_weights(c, rng):
    """Random decoder weights with the real names and shapes (docs/models/qwen3_tts.md)."""
    w = {}

    def normal(name, shape, std, mean=0.0):
        w[name] = (mean + std * rng.standard_normal(shape)).astype(np.float32)

    half = c["codebook_dim"] // 2
    q = "decoder.quantizer."
    for group, layers in (("rvq_first", 1), ("rvq_rest", c["num_quantizers"] - 1)):
        normal(q + group + ".output_proj.weight", (c["codebook_dim"], half, 1), 1.0 / math.sqrt(half))
        # Encoder side only; present in real checkpoints, unused by the decoder.
        normal(q + group + ".input_proj.weight", (half, c["codebook_dim"], 1), 1.0 / math.sqrt(c["codebook_dim"]))
        for i in range(layers):
            p = q + group + ".vq.layers.%d._codebook." % i
            usage = rng.uniform(0.5, 4.0, c["codebook_size"]).astype(np.float32)
            usage[:3] = [0.0, 1e-7, 2.0]  # below the 1e-5 clamp, too
            w[p + "cluster_usage"] = usage
            w[p + "embedding_sum"] = (rng.standard_normal((c["codebook_size"], half)) * np.maximum(usage, 1e-5)[:, None]
                                      / math.sqrt(c["num_quantizers"])).astype(np.float32)
    lat, hid, inter = c["latent_dim"], c["hidden_size"], c["intermediate_size"]
    qd = c["num_attention_heads"] * c["head_dim"]
    kvd = c["num_key_value_heads"] * c["head_dim"]
    normal("decoder.pre_conv.conv.weight", (lat, c["codebook_dim"], 3), 1.0 / math.sqrt(3 * c["codebook_dim"]))
    normal("decoder.pre_conv.conv.bias", (lat,), 0.1)
    t = "decoder.pre_transformer."
    normal(t + "input_proj.weight", (hid, lat), 1.0 / math.sqrt(lat))
    normal(t + "input_proj.bias", (hid,), 0.1)
    for i in range(c["num_hidden_layers"]):
        p = t + "layers.%d." % i
        normal(p + "input_layernorm.weight", (hid,), 0.1, 1.0)
        normal(p + "post_attention_layernorm.weight", (hid,), 0.1, 1.0)
        normal(p + "self_attn.q_proj.weight", (qd, hid), 2.0 / math.sqrt(hid))
        normal(p + "self_attn.k_proj.weight", (kvd, hid), 2.0 / math.sqrt(hid))
        normal(p + "self_attn.v_proj.weight", (kvd, hid), 1.0 / math.sqrt(hid))
        normal(p + "self_attn.o_proj.weight", (hid, qd), 1.0 / math.sqrt(qd))
        normal(p + "self_attn_layer_scale.scale", (hid,), 0.3, 0.5)
        normal(p + "mlp.gate_proj.weight", (inter, hid), 1.0 / math.sqrt(hid))
        normal(p + "mlp.up_proj.weight", (inter, hid), 1.0 / math.sqrt(hid))
        normal(p + "mlp.down_proj.weight", (hid, inter), 1.0 / math.sqrt(inter))
        normal(p + "mlp_layer_scale.scale", (hid,), 0.3, 0.5)
    normal(t + "norm.weight", (hid,), 0.1, 1.0)
    normal(t + "output_proj.weight", (lat, hid), 1.0 / math.sqrt(hid))
    normal(t + "output_proj.bias", (lat,), 0.1)
    for i, r in enumerate(c["upsampling_ratios"]):
        p = "decoder.upsample.%d." % i
        normal(p + "0.conv.weight", (lat, lat, r), 1.0 / math.sqrt(lat))
        normal(p + "0.conv.bias", (lat,), 0.1)
        normal(p + "1.dwconv.conv.weight", (lat, 1, 7), 1.0 / math.sqrt(7))
        normal(p + "1.dwconv.conv.bias", (lat,), 0.1)
        normal(p + "1.norm.weight", (lat,), 0.1, 1.0)
        normal(p + "1.norm.bias", (lat,), 0.1)
        normal(p + "1.pwconv1.weight", (4 * lat, lat), 1.0 / math.sqrt(lat))
        normal(p + "1.pwconv1.bias", (4 * lat,), 0.1)
        normal(p + "1.pwconv2.weight", (lat, 4 * lat), 1.0 / math.sqrt(4 * lat))
        normal(p + "1.pwconv2.bias", (lat,), 0.1)
        normal(p + "1.gamma", (lat,), 0.3, 0.5)
    dim = c["decoder_dim"]
    normal("decoder.decoder.0.conv.weight", (dim, lat, 7), 1.0 / math.sqrt(7 * lat))
    normal("decoder.decoder.0.conv.bias", (dim,), 0.1)
    for i, r in enumerate(c["upsample_rates"]):
        cin, cout = dim >> i, dim >> (i + 1)
        p = "decoder.decoder.%d.block." % (i + 1)
        normal(p + "0.alpha", (cin,), 0.2)
        normal(p + "0.beta", (cin,), 0.2)
        # Each output position of a stride-r transposed conv sums two taps.
        normal(p + "1.conv.weight", (cin, cout, 2 * r), 1.0 / math.sqrt(2 * cin))
        normal(p + "1.conv.bias", (cout,), 0.1)
        for u in range(3):
            pu = p + "%d." % (u + 2)
            normal(pu + "act1.alpha", (cout,), 0.2)
            normal(pu + "act1.beta", (cout,), 0.2)
            normal(pu + "conv1.conv.weight", (cout, cout, 7), 0.5 / math.sqrt(7 * cout))
            normal(pu + "conv1.conv.bias", (cout,), 0.05)
            normal(pu + "act2.alpha", (cout,), 0.2)
            normal(pu + "act2.beta", (cout,), 0.2)
            normal(pu + "conv2.conv.weight", (cout, cout, 1), 0.5 / math.sqrt(cout))
            normal(pu + "conv2.conv.bias", (cout,), 0.05)
    last = dim >> len(c["upsample_rates"])
    normal("decoder.decoder.5.alpha", (last,), 0.2)
    normal("decoder.decoder.5.beta", (last,), 0.2)
    normal("decoder.decoder.6.conv.weight", (1, last, 7), 0.1 / math.sqrt(7 * last))
    normal("decoder.decoder.6.conv.bias", (1,), 0.02)
    return w


def write_safetensors(path, tensors, dtype="F32"):
    """F32, or BF16 of float32 values that are BF16 values already (their upper 16 bits)."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4")
        data = (data.view(np.uint32) >> 16).astype("<u2").tobytes() if dtype == "BF16" else data.tobytes()
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def config_json(c):
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "encode_downsample_rate": 1920,
        "decode_upsample_rate": 1920,
        "encoder_valid_num_quantizers": 16,
        "decoder_config": dict(c),
    }


# ---------------------------------------------------------------------------------------------
# Decoder, float64, whole sequence. Activations are [channels, time] as in the PyTorch modules.


def causal_conv(x, weight, bias, dilation=1, groups=1):
    """CausalConvNet, stride 1: left zero pad (k-1)*dilation, output length = input length."""
    cout, cin_g, k = weight.shape
    pad = (k - 1) * dilation
    xp = np.concatenate([np.zeros((x.shape[0], pad)), x], axis=1)
    t = x.shape[1]
    out = np.zeros((cout, t))
    cin = x.shape[0]
    per_out = cout // groups
    for o in range(cout):
        g = o // per_out
        for j in range(k):
            seg = xp[g * cin_g:(g + 1) * cin_g, j * dilation:j * dilation + t]
            out[o] += weight[o, :, j] @ seg
    assert cin == cin_g * groups
    return out + bias[:, None]


def causal_trans_conv(x, weight, bias, stride, trim_left=False):
    """ConvTranspose1d(k, stride) with the k - stride samples trimmed on the right (Qwen3-TTS), and
    with trim_left also k - stride on the left (the Qwen3-Omni code2wav)."""
    cin, cout, k = weight.shape
    length = x.shape[1]
    full = np.zeros((cout, (length - 1) * stride + k))
    for t in range(length):
        full[:, t * stride:t * stride + k] += np.einsum("i,iok->ok", x[:, t], weight)
    full += bias[:, None]
    return full[:, k - stride:length * stride] if trim_left else full[:, :length * stride]


def snake_beta(x, alpha, beta):
    a = np.exp(alpha)[:, None]
    b = np.exp(beta)[:, None]
    return x + 1.0 / (b + 1e-9) * np.sin(a * x) ** 2


def rms_norm(x, w, eps):  # x [T, H]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):  # x [T, C]
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, theta):  # x [T, heads, hd], positions 0..T-1, NeoX rotate_half
    t, _, hd = x.shape
    inv_freq = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    freqs = np.arange(t, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)
    return x * cos + rot * sin


def transformer(x, w, c, p="decoder.pre_transformer.", projections=True):
    """pre_transformer on x [T, latent] -> [T, latent] (without projections: latent = hidden)."""
    h = x @ w[p + "input_proj.weight"].T + w[p + "input_proj.bias"] if projections else x
    t = h.shape[0]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps = c["rms_norm_eps"]
    i_idx = np.arange(t)[:, None]
    j_idx = np.arange(t)[None, :]
    visible = (j_idx <= i_idx) & (j_idx > i_idx - c["sliding_window"])
    for layer in range(c["num_hidden_layers"]):
        lp = p + "layers.%d." % layer
        a_in = rms_norm(h, w[lp + "input_layernorm.weight"], eps)
        q = (a_in @ w[lp + "self_attn.q_proj.weight"].T).reshape(t, nh, hd)
        k = (a_in @ w[lp + "self_attn.k_proj.weight"].T).reshape(t, nkv, hd)
        v = (a_in @ w[lp + "self_attn.v_proj.weight"].T).reshape(t, nkv, hd)
        q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
        group = nh // nkv
        attn = np.zeros((t, nh, hd))
        for head in range(nh):
            kh = head // group
            scores = q[:, head, :] @ k[:, kh, :].T / math.sqrt(hd)
            scores = np.where(visible, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
            attn[:, head, :] = scores @ v[:, kh, :]
        o = attn.reshape(t, nh * hd) @ w[lp + "self_attn.o_proj.weight"].T
        h = h + w[lp + "self_attn_layer_scale.scale"] * o
        m_in = rms_norm(h, w[lp + "post_attention_layernorm.weight"], eps)
        gate = m_in @ w[lp + "mlp.gate_proj.weight"].T
        up = m_in @ w[lp + "mlp.up_proj.weight"].T
        m = (silu(gate) * up) @ w[lp + "mlp.down_proj.weight"].T
        h = h + w[lp + "mlp_layer_scale.scale"] * m
    h = rms_norm(h, w[p + "norm.weight"], eps)
    return h @ w[p + "output_proj.weight"].T + w[p + "output_proj.bias"] if projections else h


def convnext(x, w, p):  # x [C, T]
    r = x
    y = causal_conv(x, w[p + "dwconv.conv.weight"], w[p + "dwconv.conv.bias"], groups=x.shape[0]).T  # [T, C]
    y = layer_norm(y, w[p + "norm.weight"], w[p + "norm.bias"], 1e-6)
    y = gelu(y @ w[p + "pwconv1.weight"].T + w[p + "pwconv1.bias"])
    y = y @ w[p + "pwconv2.weight"].T + w[p + "pwconv2.bias"]
    y = y * w[p + "gamma"]
    return r + y.T


def decode(codes, w, c):
    """codes int [frames, 16] -> waveform [frames * 1920]."""
    codes = np.maximum(codes, 0)
    q = "decoder.quantizer."

    def table(group, i):
        p = q + group + ".vq.layers.%d._codebook." % i
        return w[p + "embedding_sum"] / np.maximum(w[p + "cluster_usage"], 1e-5)[:, None]

    first = table("rvq_first", 0)[codes[:, 0]]  # [F, half]
    rest = sum(table("rvq_rest", j)[codes[:, j + 1]] for j in range(c["num_quantizers"] - 1))
    x = first @ w[q + "rvq_first.output_proj.weight"][:, :, 0].T + rest @ w[q + "rvq_rest.output_proj.weight"][:, :, 0].T
    x = x.T  # [codebook_dim, F]
    x = causal_conv(x, w["decoder.pre_conv.conv.weight"], w["decoder.pre_conv.conv.bias"])
    x = transformer(x.T, w, c).T  # [latent, F]
    for i, r in enumerate(c["upsampling_ratios"]):
        p = "decoder.upsample.%d." % i
        x = causal_trans_conv(x, w[p + "0.conv.weight"], w[p + "0.conv.bias"], r)
        x = convnext(x, w, p + "1.")
    x = causal_conv(x, w["decoder.decoder.0.conv.weight"], w["decoder.decoder.0.conv.bias"])
    for i, r in enumerate(c["upsample_rates"]):
        p = "decoder.decoder.%d.block." % (i + 1)
        x = snake_beta(x, w[p + "0.alpha"], w[p + "0.beta"])
        x = causal_trans_conv(x, w[p + "1.conv.weight"], w[p + "1.conv.bias"], r)
        for u, dilation in enumerate((1, 3, 9)):
            pu = p + "%d." % (u + 2)
            res = x
            y = snake_beta(x, w[pu + "act1.alpha"], w[pu + "act1.beta"])
            y = causal_conv(y, w[pu + "conv1.conv.weight"], w[pu + "conv1.conv.bias"], dilation=dilation)
            y = snake_beta(y, w[pu + "act2.alpha"], w[pu + "act2.beta"])
            y = causal_conv(y, w[pu + "conv2.conv.weight"], w[pu + "conv2.conv.bias"])
            x = res + y
    x = snake_beta(x, w["decoder.decoder.5.alpha"], w["decoder.decoder.5.beta"])
    x = causal_conv(x, w["decoder.decoder.6.conv.weight"], w["decoder.decoder.6.conv.bias"])
    return np.clip(x[0], -1.0, 1.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(SEED)
    weights = make_weights(TINY, rng)
    codes = rng.integers(0, TINY["codebook_size"], size=(FRAMES, TINY["num_quantizers"]), dtype=np.int32)
    codes[3, :] = 0  # the all-zero frame a padded talker step produces
    wave = decode(codes, {k: v.astype(np.float64) for k, v in weights.items()}, TINY)
    assert wave.shape == (FRAMES * 1920,)
    st = os.path.join(args.out, "speech_tokenizer")
    os.makedirs(st, exist_ok=True)
    write_safetensors(os.path.join(st, "model.safetensors"), weights)
    with open(os.path.join(st, "config.json"), "w") as f:
        json.dump(config_json(TINY), f, indent=2)
        f.write("\n")
    np.save(os.path.join(args.out, "codes.npy"), codes)
    np.save(os.path.join(args.out, "waveform.npy"), wave.astype(np.float32))
    clipped = np.mean(np.abs(wave) >= 1.0)
    print("frames %d, samples %d, max |x| %.3f, rms %.3f, clipped %.1f%%" %
          (FRAMES, wave.size, np.abs(wave).max(), math.sqrt(np.mean(wave ** 2)), 100 * clipped))


if __name__ == "__main__":
    main()
