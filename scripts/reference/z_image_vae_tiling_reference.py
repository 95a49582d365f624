#!/usr/bin/env python3
"""Runs diffusers' AutoencoderKL tiled decode (vae.enable_tiling()) in float32 on the CPU over seeded latents.

    python3 z_image_vae_tiling_reference.py --diffusers DIR --model CKPT --out REF

DIR holds the `diffusers` package (the diffusers repository's src/ folder; put on sys.path, nothing
is installed); CKPT is a diffusers-layout Z-Image checkpoint (make_tiny_z_image.py). The script draws
latents of LATENT_SHAPE from a seeded torch generator, decodes them as ZImagePipeline does after its
last step (latents / scaling_factor + shift_factor, vae.decode, image_processor.postprocess to "np",
x255, rounded), once with the VAE's tiling on and once with it off, and writes:

    tiled_latents.npy         [1, 16, h, w] float32, the latents as the denoiser leaves them
    tiled_decoded.npy         [H, W, 3] float32, the tiled decoder output (before postprocessing)
    tiled_image.npy           [H, W, 3] uint8, the tiled decode's image
    tiled_untiled_image.npy   [H, W, 3] uint8, the same latents decoded whole
    tiled_reference.json      shapes, the tiling parameters and versions

With the tiny checkpoint's VAE (sample_size 64, 3 blocks: tiles of 16 latents every 12, blends over
16 pixels, 48 pixels kept per tile) latents of 40 x 28 make 4 x 3 tiles: both blend directions,
tiles cut at the bottom and right edges, and a last row of tiles inside the one before it.
Everything runs in float32 on the CPU (the weights on disk are bf16, upcast exactly).
"""
import argparse
import json
import os
import sys

LATENT_SHAPE = (1, 16, 40, 28)
SEED = 24


def run(args):
    sys.path.insert(0, os.path.abspath(args.diffusers))
    import numpy as np
    import torch
    import diffusers
    from diffusers import AutoencoderKL
    from diffusers.image_processor import VaeImageProcessor

    torch.set_num_threads(8)
    os.makedirs(args.out, exist_ok=True)
    vae = AutoencoderKL.from_pretrained(args.model, subfolder="vae", torch_dtype=torch.float32)
    vae.to("cpu")
    vae.eval()
    vae_scale_factor = 2 ** (len(vae.config.block_out_channels) - 1)
    # ZImagePipeline's image processor (its postprocess does not depend on the scale factor).
    processor = VaeImageProcessor(vae_scale_factor=vae_scale_factor * 2)

    gen = torch.Generator("cpu").manual_seed(SEED)
    latents = torch.randn(LATENT_SHAPE, generator=gen, dtype=torch.float32)

    def decode(tiled):
        if tiled:
            vae.enable_tiling()
        else:
            vae.disable_tiling()
        z = latents.clone().to(vae.dtype)
        z = (z / vae.config.scaling_factor) + vae.config.shift_factor
        with torch.no_grad():
            decoded = vae.decode(z, return_dict=False)[0]
        image = processor.postprocess(decoded, output_type="np")
        return decoded, (image[0] * 255).round().astype(np.uint8)

    tiled_decoded, tiled_image = decode(True)
    assert vae.use_tiling and (LATENT_SHAPE[2] > vae.tile_latent_min_size or LATENT_SHAPE[3] > vae.tile_latent_min_size)
    _, untiled_image = decode(False)

    np.save(os.path.join(args.out, "tiled_latents.npy"), latents.numpy())
    np.save(os.path.join(args.out, "tiled_decoded.npy"), tiled_decoded[0].permute(1, 2, 0).contiguous().float().numpy())
    np.save(os.path.join(args.out, "tiled_image.npy"), tiled_image)
    np.save(os.path.join(args.out, "tiled_untiled_image.npy"), untiled_image)
    overlap_size = int(vae.tile_latent_min_size * (1 - vae.tile_overlap_factor))
    blend_extent = int(vae.tile_sample_min_size * vae.tile_overlap_factor)
    rec = dict(diffusers=diffusers.__version__, torch=torch.__version__, seed=SEED, latents_shape=list(LATENT_SHAPE),
               image_shape=list(tiled_image.shape), tile_sample_min_size=vae.tile_sample_min_size,
               tile_latent_min_size=vae.tile_latent_min_size, tile_overlap_factor=vae.tile_overlap_factor,
               overlap_size=overlap_size, blend_extent=blend_extent,
               row_limit=vae.tile_sample_min_size - blend_extent,
               tiled_vs_untiled_max_diff=int(np.abs(tiled_image.astype(int) - untiled_image.astype(int)).max()),
               image_mean=float(tiled_image.mean()))
    with open(os.path.join(args.out, "tiled_reference.json"), "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps(rec))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diffusers", required=True, help="folder holding the diffusers package (diffusers/src)")
    ap.add_argument("--model", required=True, help="diffusers-layout Z-Image checkpoint")
    ap.add_argument("--out", required=True)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
