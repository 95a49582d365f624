#!/usr/bin/env python3
"""A tiny random-weight Qwen3-TTS speech-tokenizer *encoder* (reference audio -> 16-codebook codes at
12.5 Hz, the input of in-context voice cloning) and its reference codes.

Qwen3-TTS's 12 Hz tokenizer encoder is transformers' MimiModel without its decoder: the SEANet
convolutional encoder (strides 4, 5, 6, 8: 24 kHz -> 25 Hz), the 8-layer encoder transformer, a
stride-2 downsampling convolution (-> 12.5 Hz) and the split residual vector quantizer (1 semantic +
acoustic codebooks), of which the first `encoder_valid_num_quantizers` codebooks are kept. This
builds MimiModel from a tiny MimiConfig (the released strides, small widths, a 64-entry codebook so
the codes fit the tiny talker's codebook), randomizes its codebooks (a fresh MimiModel's are zero),
runs `encode` on the same reference waveform as make_tiny_qwen3_tts_base.py and saves:

  speech_tokenizer/config.json        encoder_config (the MimiConfig) + tests/data/tiny_qwen3_tts_codec's decoder_config
  speech_tokenizer/model.safetensors  encoder.* (MimiModel's names without the decoder side)
  codes.npy [16, F] int32, and the activations after the SEANet encoder, the transformer and the
  downsampling (*.npy, [C, T]) for debugging a port; reference.json with the smallest
  nearest/second-nearest distance gap met by the quantizer.

    python3 qwen3_tts_speech_encoder_reference.py --out DIR   # GPU machine: DIR/tiny_qwen3_tts_speech_encoder.tar.gz
"""
import argparse
import json
import os
import sys
import tarfile
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_qwen3_tts_base as base  # noqa: E402

SEED = 20261203
VALID_QUANTIZERS = 16
MIMI = dict(sampling_rate=24000, audio_channels=1, hidden_size=16, num_filters=4, num_residual_layers=1,
            upsampling_ratios=[8, 6, 5, 4], kernel_size=7, last_kernel_size=3, residual_kernel_size=3,
            dilation_growth_rate=2, use_causal_conv=True, pad_mode="constant", compress=2, trim_right_ratio=1.0,
            codebook_size=64, codebook_dim=8, vector_quantization_hidden_dimension=8, num_quantizers=20,
            num_semantic_quantizers=1, upsample_groups=16, num_hidden_layers=2, intermediate_size=32,
            num_attention_heads=2, num_key_value_heads=2, head_dim=8, hidden_act="gelu", norm_eps=1e-5,
            sliding_window=250, layer_scale_initial_scale=0.01, max_position_embeddings=8000,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, frame_rate=12.5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(SEED)
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    codec_config = json.load(open(os.path.join(here, "..", "..", "tests", "data", "tiny_qwen3_tts_codec",
                                               "speech_tokenizer", "config.json")))
    config = transformers.MimiConfig(**MIMI)
    model = transformers.MimiModel(config).float().eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("embed_sum"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            elif name.endswith("cluster_usage"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("layer_scale.scale") or name.endswith("_layer_scale.scale"):
                p.copy_(0.3 + 0.2 * torch.rand(p.shape, generator=gen))
    wave = base.reference_waveform()
    x = torch.from_numpy(wave)[None, None]
    acts = {}
    hooks = [getattr(model, n).register_forward_hook(
        lambda m, i, o, n=n: acts.__setitem__(n, (o[0] if isinstance(o, tuple) else getattr(o, "last_hidden_state", o))))
        for n in ("encoder", "encoder_transformer", "downsample")]
    with torch.no_grad():
        out = model.encode(x, num_quantizers=MIMI["num_quantizers"])
    for h in hooks:
        h.remove()
    audio_codes = out[0] if isinstance(out, tuple) else out.audio_codes
    codes = audio_codes[0, :VALID_QUANTIZERS].to(torch.int32).numpy()

    # The quantizer's margins: per codebook the gap between the nearest and second-nearest entry.
    margins = []
    try:
        with torch.no_grad():
            emb = acts["downsample"]
            q = model.quantizer
            for rvq, n in ((q.semantic_residual_vector_quantizer, q.num_semantic_quantizers),
                           (q.acoustic_residual_vector_quantizer, VALID_QUANTIZERS - q.num_semantic_quantizers)):
                residual = rvq.input_proj(emb) if rvq.input_proj is not None else emb
                for layer in rvq.layers[:n]:
                    cb = layer.codebook
                    table = cb.embed_sum / cb.cluster_usage.clamp(min=cb.epsilon)[:, None]
                    r = residual.transpose(1, 2).reshape(-1, table.shape[1])
                    d = torch.cdist(r[None], table[None])[0]
                    top = torch.topk(d, 2, largest=False).values
                    margins.append(float((top[:, 1] - top[:, 0]).min()))
                    residual = residual - table[d.argmin(-1)].reshape(1, -1, table.shape[1]).transpose(1, 2)
    except Exception as e:  # noqa: BLE001 -- the codes still land
        margins = [float("nan")]
        print(f"quantizer margins not computed: {e!r}")
    state = {f"encoder.{k}": v.contiguous() for k, v in model.state_dict().items()
             if not (k.startswith("decoder") or k.startswith("upsample") or k.startswith("decoder_transformer"))}
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "tiny_qwen3_tts_speech_encoder")
        st = os.path.join(root, "speech_tokenizer")
        os.makedirs(st)
        enc_cfg = {k: v for k, v in config.to_dict().items() if k not in ("transformers_version", "architectures")}
        cfg = dict(codec_config, encoder_config=enc_cfg)
        with open(os.path.join(st, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        save_file(state, os.path.join(st, "model.safetensors"), metadata={"format": "pt"})
        np.save(os.path.join(root, "codes.npy"), codes)
        for n, a in acts.items():
            np.save(os.path.join(root, f"after_{n}.npy"), a[0].float().numpy() if a.dim() == 3 else a.float().numpy())
        ref = dict(waveform="make_tiny_qwen3_tts_base.py reference_waveform() (tests/data/tiny_qwen3_tts_base/"
                            "reference_waveform.npy)", samples=int(wave.shape[0]), codes_shape=list(codes.shape),
                   min_quantizer_margin=min(margins), per_codebook_margin=margins,
                   activation_shapes={n: list(a.shape) for n, a in acts.items()},
                   tensor_names=sorted(state), transformers_version=transformers.__version__,
                   torch_version=torch.__version__)
        with open(os.path.join(root, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        with tarfile.open(os.path.join(args.out, "tiny_qwen3_tts_speech_encoder.tar.gz"), "w:gz") as tar:
            tar.add(root, arcname="tiny_qwen3_tts_speech_encoder")
    print(f"codes {codes.shape}: {codes[:, :6].tolist()} min margin {min(margins):.3e}; "
          f"activations {ref['activation_shapes']}; {len(state)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
