#!/usr/bin/env python3
"""The transformers peer of the Qwen3-Omni thinker benchmark (scripts/gpu/run_omni_thinker_bench_on_gpu.sh).

Run on the GPU machine (torch, transformers 5.x) after our benchmark has exited, in the same call.
From a config.json (the released Qwen3-Omni-30B-A3B shapes: --model DIR holds it) it builds
Qwen3OmniMoeThinkerForConditionalGeneration on the GPU in bfloat16 with random weights
(transformers' own initialisation, no checkpoint to read) and eager attention, then times:

  multimodal prefill  one forward of a chat prompt with --audio-seconds of audio (log-mel features
                      of that many frames), one --image-size image (its patches) and --text-tokens
                      text tokens, laid out as the chat template lays them out (median of 3 after a
                      warm-up); the audio tower, the vision encoder and the text model together
  decode              model.generate on random text prompts of --input-len tokens, exactly
                      --output-len new tokens, greedy, per batch size (hf_generate_bench.py's
                      measure: prefill = a generate of one token, decode = the rest per step)

    python3 qwen3_omni_thinker_bench.py --model DIR --batch-sizes 1,8,64 --input-len 128 \
        --output-len 16 --out results.json
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_generate_bench import measure  # noqa: E402


def audio_rows(frames, n_window=50):
    """The audio tower's output rows for `frames` feature frames (the processor's placeholder count)."""
    chunk = 2 * n_window
    rest = frames % chunk

    def halved(n):
        return (n - 1) // 2 + 1

    return (halved(halved(halved(rest))) if rest else 0) + (frames // chunk) * 13


def chat_ids(config, audio_tokens, image_tokens, text_tokens, gen):
    """<|im_start|>user\\n <audio> <image> text <|im_end|>\\n<|im_start|>assistant\\n, as token ids."""
    import torch
    t = config["thinker_config"]
    im_start, im_end = config["im_start_token_id"], config["im_end_token_id"]
    user, assistant, newline = config["user_token_id"], config["assistant_token_id"], 198
    audio_start, audio_pad = t["audio_start_token_id"], t["audio_token_id"]
    vision_start, image_pad = t["vision_start_token_id"], t["image_token_id"]
    text = torch.randint(1000, 100000, (text_tokens,), generator=gen).tolist()
    ids = ([im_start, user, newline, audio_start] + [audio_pad] * audio_tokens + [audio_start + 1] +
           [vision_start] + [image_pad] * image_tokens + [vision_start + 1] + text +
           [im_end, newline, im_start, assistant, newline])
    return torch.tensor([ids], device="cuda")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch-sizes", default="1,8,64")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=16)
    parser.add_argument("--audio-seconds", type=float, default=10.0)
    parser.add_argument("--image-size", default="640x480", help="WIDTHxHEIGHT, multiples of 32")
    parser.add_argument("--text-tokens", type=int, default=50)
    parser.add_argument("--out")
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeThinkerForConditionalGeneration

    with open(os.path.join(args.model, "config.json")) as f:
        raw = json.load(f)
    thinker = {k: v for k, v in raw["thinker_config"].items() if k != "model_type"}
    for key in ("audio_config", "vision_config", "text_config"):
        thinker[key] = {k: v for k, v in thinker[key].items() if k != "model_type"}
    config = Qwen3OmniMoeThinkerConfig(**thinker)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.device("cuda"):
        model = Qwen3OmniMoeThinkerForConditionalGeneration._from_config(
            config, dtype=torch.bfloat16, attn_implementation="eager").eval()
    built = time.perf_counter() - start
    results = {"torch": torch.__version__, "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name(0), "build_seconds": built,
               "parameters": sum(p.numel() for p in model.parameters()), "decode": []}
    print(f"thinker: {results['parameters'] / 1e9:.2f} B parameters, built in {built:.1f} s", flush=True)

    def save():
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=2)

    # The multimodal prefill.
    vision = raw["thinker_config"]["vision_config"]
    patch, merge, tps = vision["patch_size"], vision["spatial_merge_size"], vision["temporal_patch_size"]
    width, height = (int(v) for v in args.image_size.split("x"))
    grid_h, grid_w = height // patch, width // patch
    frames = int(round(args.audio_seconds * 100))
    gen = torch.Generator().manual_seed(1)
    ids = chat_ids(raw, audio_rows(frames), grid_h * grid_w // (merge * merge), args.text_tokens, gen)
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "input_features": torch.randn(1, 128, frames, generator=gen).to("cuda", torch.bfloat16),
        "feature_attention_mask": torch.ones(1, frames, dtype=torch.long, device="cuda"),
        "pixel_values": torch.randn(grid_h * grid_w, 3 * tps * patch * patch, generator=gen).to("cuda", torch.bfloat16),
        "image_grid_thw": torch.tensor([[1, grid_h, grid_w]], device="cuda"),
    }
    times = []
    with torch.inference_mode():
        for i in range(4):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(**inputs, use_cache=True)
            torch.cuda.synchronize()
            if i > 0:
                times.append(time.perf_counter() - t0)
    results["multimodal_prefill"] = {"prompt_tokens": ids.shape[1], "audio_frames": frames,
                                     "image_grid": [1, grid_h, grid_w], "ms": 1e3 * statistics.median(times),
                                     "all_ms": [1e3 * t for t in times]}
    save()
    print(f"multimodal prefill: {ids.shape[1]} tokens ({args.audio_seconds:g} s audio, {args.image_size} image, "
          f"{args.text_tokens} text), {results['multimodal_prefill']['ms']:.1f} ms", flush=True)

    with torch.inference_mode():
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            row = measure(torch, model, config.text_config.vocab_size, batch, args)
            results["decode"].append(row)
            save()
            print(f"  eager batch {batch:4d}: prefill {row['prefill_ms']:9.2f} ms, decode "
                  f"{row['decode_ms_per_step']:8.3f} ms/step, {row['output_tokens_per_s']:9.0f} tok/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
