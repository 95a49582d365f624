#!/usr/bin/env python3
"""Seconds per image of diffusers' ZImagePipeline on CUDA in bfloat16: the peer of omnistage's
Z-Image benchmark (docs/performance.md), on the same checkpoint in the same run.

    python3 z_image_bench.py --diffusers DIR --model CKPT [--size 1024] [--steps 8] [--runs 3]

DIR holds the `diffusers` package (the diffusers repository's src/ folder; put on sys.path, nothing
is installed). One warm-up image, then --runs timed images (prompt to decoded image, guidance 0 as
Z-Image-Turbo runs, fresh seeded noise each), synchronised around each; then, with --batches 4,8,
one timed call per size with that many prompts (the pipeline batches them); prints one JSON line
with every run's seconds, the median, the batched calls' images per second and the peak GPU memory.
"""
import argparse
import json
import os
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--diffusers", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batches", default="")
    args = p.parse_args()
    sys.path.insert(0, os.path.abspath(args.diffusers))
    import torch
    import diffusers
    from diffusers import AutoencoderKL, ZImagePipeline

    # omnistage's random checkpoints hold the VAE's decoder only (the encoder is unused for
    # text-to-image): build the VAE with its missing encoder initialised rather than left on meta.
    vae = AutoencoderKL.from_pretrained(os.path.join(args.model, "vae"), torch_dtype=torch.bfloat16,
                                        low_cpu_mem_usage=False)
    pipe = ZImagePipeline.from_pretrained(args.model, vae=vae, torch_dtype=torch.bfloat16).to("cuda")
    pipe.set_progress_bar_config(disable=True)

    def one(seed, n=1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        pipe(prompt=["a red fox in the snow"] * n, height=args.size, width=args.size, num_inference_steps=args.steps,
             guidance_scale=0.0, generator=torch.Generator("cuda").manual_seed(seed), output_type="np")
        torch.cuda.synchronize()
        return time.perf_counter() - start

    one(0)
    torch.cuda.reset_peak_memory_stats()
    runs = [one(1 + i) for i in range(args.runs)]
    peak_single = torch.cuda.max_memory_allocated() / 2**30
    batched = []
    for n in [int(b) for b in args.batches.split(",") if b]:
        seconds = one(100, n)
        batched.append({"batch": n, "seconds": seconds, "images_per_s": n / seconds})
    print(json.dumps({"peer": "diffusers", "version": diffusers.__version__, "torch": torch.__version__,
                      "size": args.size, "steps": args.steps, "seconds": runs, "median_s": statistics.median(runs),
                      "peak_gib": peak_single, "batched": batched,
                      "peak_gib_batched": torch.cuda.max_memory_allocated() / 2**30}))


if __name__ == "__main__":
    main()
