#!/usr/bin/env python3
"""Runs diffusers' ZImagePipeline in float32 on the CPU over a checkpoint, from fixed latents.

    python3 z_image_reference.py --diffusers DIR --model CKPT --out REF

DIR holds the `diffusers` package (the diffusers repository's src/ folder; put on sys.path, nothing
is installed); CKPT is a diffusers-layout Z-Image checkpoint (make_tiny_z_image.py). For each case of
CASES the script draws the initial latents from a seeded torch generator, saves them, and runs the
pipeline itself with `latents=` those, recording on the way:

    <case>_input_ids.npy / _negative_input_ids.npy   int64, the token ids the text encoder saw (valid ones)
    <case>_prompt_embeds.npy / _negative_prompt_embeds.npy   [L, cap_feat_dim] float32 (hidden_states[-2])
    <case>_latents_init.npy    [1, 16, H/4, W/4] float32, the `latents=` argument
    <case>_transformer_step0.npy   [n, 16, H/4, W/4] float32: the transformer's output list at the first
                               step (n = 2 with CFG: [cond, uncond])
    <case>_latents_steps.npy   [steps, 1, 16, H/4, W/4] float32: the latents after each scheduler step
    <case>_image.npy           [H, W, 3] uint8: the pipeline's image (output_type "np", x255, rounded)
    reference.json             the cases, sigmas, timesteps, shapes and versions

Everything runs in float32 on the CPU (the weights on disk are bf16, upcast exactly).
"""
import argparse
import json
import os
import sys

CASES = [
    # No CFG (Turbo's guidance 0), a square size whose 8x8 image tokens need no padding.
    dict(name="plain", prompt="a red fox in the snow", negative_prompt=None, guidance_scale=0.0, height=64,
         width=64, num_inference_steps=3, max_sequence_length=512, seed=11),
    # CFG with a negative prompt, 6x8 = 48 image tokens padded to 64, captions of different lengths
    # (the batched [cond, uncond] pass uses an attention mask).
    dict(name="cfg", prompt="a lighthouse at dusk, oil painting", negative_prompt="blurry, low quality",
         guidance_scale=4.0, height=48, width=64, num_inference_steps=3, max_sequence_length=512, seed=12),
    # guidance 1 (CFG is on for any guidance > 0) with the default empty negative prompt, 5x7 = 35 image
    # tokens padded to 64, a prompt truncated by max_sequence_length.
    dict(name="cfg1_truncated", prompt="a very long prompt about a small house on a hill under the stars",
         negative_prompt=None, guidance_scale=1.0, height=40, width=56, num_inference_steps=2,
         max_sequence_length=24, seed=13),
]


def run(args):
    sys.path.insert(0, os.path.abspath(args.diffusers))
    import numpy as np
    import torch
    import transformers
    import diffusers
    from diffusers import ZImagePipeline

    torch.set_num_threads(8)
    os.makedirs(args.out, exist_ok=True)
    pipe = ZImagePipeline.from_pretrained(args.model, torch_dtype=torch.float32)
    pipe.to("cpu")
    pipe.set_progress_bar_config(disable=True)
    out = dict(diffusers=diffusers.__version__, torch=torch.__version__, transformers=transformers.__version__,
               cases=[])

    tokenized = []
    real_tokenizer_call = pipe.tokenizer.__class__.__call__

    def recording_tokenizer(self, text, *a, **kw):
        enc = real_tokenizer_call(self, text, *a, **kw)
        tokenized.append([[int(i) for i, m in zip(ids, mask) if m] for ids, mask in
                          zip(enc.input_ids.tolist(), enc.attention_mask.tolist())])
        return enc

    pipe.tokenizer.__class__.__call__ = recording_tokenizer

    for case in CASES:
        name = case["name"]
        tokenized.clear()
        embeds = {}
        real_encode = pipe.encode_prompt

        def encode_prompt(*a, **kw):
            pos, neg = real_encode(*a, **kw)
            embeds["pos"], embeds["neg"] = pos, neg
            return pos, neg

        pipe.encode_prompt = encode_prompt
        calls = []
        real_forward = pipe.transformer.forward

        def forward(x, t, cap_feats, *a, **kw):
            res = real_forward(x, t, cap_feats, *a, **kw)
            calls.append(dict(out=[o.detach().float().squeeze(1).clone() for o in res[0]],
                              t=[float(v) for v in t]))
            return res

        pipe.transformer.forward = forward
        steps = []

        def on_step_end(p, i, t, kwargs):
            steps.append(kwargs["latents"].detach().float().clone())
            return {}

        h, w = case["height"], case["width"]
        gen = torch.Generator("cpu").manual_seed(case["seed"])
        f = pipe.vae_scale_factor * 2
        latents = torch.randn((1, pipe.transformer.in_channels, 2 * (h // f), 2 * (w // f)), generator=gen,
                              dtype=torch.float32)
        with torch.no_grad():
            image = pipe(prompt=case["prompt"], negative_prompt=case["negative_prompt"], height=h, width=w,
                         num_inference_steps=case["num_inference_steps"], guidance_scale=case["guidance_scale"],
                         latents=latents.clone(), max_sequence_length=case["max_sequence_length"],
                         output_type="np", callback_on_step_end=on_step_end).images
        pipe.encode_prompt = real_encode
        pipe.transformer.forward = real_forward
        cfg = case["guidance_scale"] > 0
        assert len(calls) == case["num_inference_steps"] and len(steps) == case["num_inference_steps"]
        assert len(tokenized) == (2 if cfg else 1), len(tokenized)
        image_u8 = (image[0] * 255).round().astype(np.uint8)

        def save(suffix, arr):
            np.save(os.path.join(args.out, f"{name}_{suffix}.npy"), arr)

        save("input_ids", np.array(tokenized[0][0], dtype=np.int64))
        save("prompt_embeds", embeds["pos"][0].float().numpy())
        if cfg:
            save("negative_input_ids", np.array(tokenized[1][0], dtype=np.int64))
            save("negative_prompt_embeds", embeds["neg"][0].float().numpy())
        save("latents_init", latents.numpy())
        save("transformer_step0", torch.stack(calls[0]["out"]).numpy())
        save("latents_steps", torch.stack(steps).numpy())
        save("image", image_u8)
        sigmas = [float(s) for s in pipe.scheduler.sigmas]
        timesteps = [float(s) for s in pipe.scheduler.timesteps]
        rec = dict(case, cfg=cfg, sigmas=sigmas, timesteps=timesteps, dit_t=[c["t"][0] for c in calls],
                   prompt_tokens=len(tokenized[0][0]),
                   negative_prompt_tokens=len(tokenized[1][0]) if cfg else None,
                   latents_shape=list(latents.shape), image_shape=list(image_u8.shape),
                   image_mean=float(image_u8.mean()), image_saturated=float(((image_u8 == 0) | (image_u8 == 255)).mean()),
                   latents_final_absmax=float(steps[-1].abs().max()))
        out["cases"].append(rec)
        print(json.dumps({k: rec[k] for k in ("name", "prompt_tokens", "negative_prompt_tokens", "sigmas",
                                              "image_mean", "image_saturated", "latents_final_absmax")}))
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diffusers", required=True, help="folder holding the diffusers package (diffusers/src)")
    ap.add_argument("--model", required=True, help="diffusers-layout Z-Image checkpoint")
    ap.add_argument("--out", required=True)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
