#!/usr/bin/env python3
"""Hugging Face reference outputs of the tiny Qwen3-Omni thinker for prompts with images and video.

Run on the GPU machine (torch 2.11, transformers 5.17; float32 on the CPU, attn_implementation
"eager") over the checkpoint that make_tiny_qwen3_omni.py made (tests/data/tiny_qwen3_omni/
per_expert: a random-weight vision encoder with DeepStack after ViT blocks 0 and 1, 16-pixel
patches, temporal patch 2, 2 x 2 merge, and preprocessor_config.json). Every case is one chat prompt
run through Qwen3OmniMoeProcessor (the Qwen2-VL image and video processors built from
preprocessor_config.json's fields: smart resize, bicubic resampling of the uint8 pixels, rescale and
normalisation, patches; the <|image_pad|>/<|video_pad|> expansion; the tokenizer) and the thinker of
Qwen3OmniMoeForConditionalGeneration:

    case_<c>/image_<k>.npy         the k-th image of the prompt, uint8 [height, width, 3]
    case_<c>/frames.npy            the video's frames, uint8 [frames, height, width, 3] (already sampled)
    case_<c>/waveform.npy          the video's audio track (use_audio_in_video), float32 mono at 16 kHz
    case_<c>/pixel_values.npy      the processor's patches [patches, 3 * 2 * 16 * 16] float32
    case_<c>/visual_embeds.npy     the vision encoder's merged rows for all media [tokens, hidden]
    case_<c>/deepstack.npy         its DeepStack rows [indexes, tokens, hidden]
    case_<c>/position_ids.npy      get_rope_index's positions [3, prompt] (float32: a video's temporal
                                   positions are fractional when 13 x seconds per grid is not whole)
    case_<c>/logits.npy            thinker logits at every prompt position [prompt, vocab]
    reference.json                 per case: the prompt text, the media seed, the grids (t, h, w),
                                   the video's fps and seconds per temporal grid, the processor kwargs
                                   passed, the token ids after expansion, the rope delta (a float), the
                                   16-token greedy continuation (argmax over the full sequence at each
                                   step) and its margins

Case 0 has two images (90 x 150, resized up to 96 x 160, and 100 x 70, resized down to 96 x 64);
case 1 has one video of 5 frames of 70 x 100 at 2 frames per second (resized to 64 x 96; the last
frame is repeated to fill the third temporal patch); case 2 a video of 4 frames of 40 x 60 at 1.5
frames per second (resized up to 64 x 96; 2 / 1.5 s per temporal patch: temporal positions 0 and
17.33 after the start); case 3 a video of 6 frames of 40 x 60 at 2 frames per second (64 x 96: three
temporal patches of 6 rows, 13 positions apart) with its 2.3 s audio track (30 audio rows),
use_audio_in_video: the processor
interleaves the audio rows with the video rows by time and get_rope_index gives the segment its
positions, the audio outlasting the video; case 4 one 60 x 100 image with the flat processor kwargs
min_pixels 1024 and max_pixels 3072 (as vLLM passes a request's mm_processor_kwargs), which make its
grid 2 x 4 instead of 4 x 6. Media seeds are tried in order until every greedy step's margin clears 2e-3 and every
routing decision's gap 2e-5.

    python3 scripts/reference/qwen3_omni_vision_reference.py \
        --checkpoint tests/data/tiny_qwen3_omni/per_expert --out DIR/vision
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"
TURN = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
CASES = [dict(images=[(90, 150), (100, 70)], text=TURN.format(f"{IMAGE}What is it?{IMAGE}Compare.")),
         dict(video=(5, 70, 100), fps=2.0, text=TURN.format(f"{VIDEO}What happens?")),
         dict(video=(4, 40, 60), fps=1.5, text=TURN.format(f"{VIDEO}What happens?")),
         dict(video=(6, 40, 60), fps=2.0, audio_samples=36800, text=TURN.format(f"{VIDEO}What is said?")),
         dict(images=[(60, 100)], mm_processor_kwargs=dict(min_pixels=1024, max_pixels=3072),
              text=TURN.format(f"{IMAGE}What is it?"))]
SAMPLE_RATE = 16000
NEW_TOKENS = 16
SEED = 20261204
SEED_ATTEMPTS = 24
TOKENS = dict(audio_token="<|audio_pad|>", image_token="<|image_pad|>", video_token="<|video_pad|>",
              vision_bos_token="<|vision_start|>", vision_eos_token="<|vision_end|>",
              audio_bos_token="<|audio_start|>", audio_eos_token="<|audio_end|>")


def picture(height, width, seed, np):
    """A deterministic test picture: gradients, a disc and noise (edges and texture for resampling)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = rng.uniform(0.2, 0.4) * min(height, width)
    disc = (y - rng.uniform(0.3, 0.7) * height) ** 2 + (x - rng.uniform(0.3, 0.7) * width) ** 2 < r * r
    img = np.stack([255 * x / width, 255 * y / height, 128 + 100 * np.sin(x / rng.uniform(3, 9) + y / 7)], -1)
    img = 0.7 * img + 76 * disc[..., None] * rng.uniform(0, 1, 3) + rng.normal(0, 12, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def video_frames(frames, height, width, seed, np):
    """A disc moving over a picture."""
    out = []
    y, x = np.mgrid[0:height, 0:width]
    for t in range(frames):
        f = picture(height, width, seed, np)
        f[(y - height * (0.2 + 0.15 * t)) ** 2 + (x - width * (0.8 - 0.12 * t)) ** 2 < (0.15 * height) ** 2] = \
            [250 - 30 * t, 20 + 40 * t, 90]
        out.append(f)
    return np.stack(out)


def make_processor(checkpoint, transformers):
    """Qwen3OmniMoeProcessor with Qwen2-VL image and video processors of preprocessor_config.json's
    fields, its Whisper feature extractor and the checkpoint's tokenizer."""
    pre = json.load(open(os.path.join(checkpoint, "preprocessor_config.json")))
    fe = transformers.WhisperFeatureExtractor(feature_size=pre["feature_size"], sampling_rate=pre["sampling_rate"],
                                              hop_length=pre["hop_length"], chunk_length=pre["chunk_length"],
                                              n_fft=pre["n_fft"], padding_value=pre["padding_value"],
                                              dither=pre.get("dither", 0.0), return_attention_mask=True)
    tok = transformers.AutoTokenizer.from_pretrained(checkpoint)
    for name, value in TOKENS.items():
        setattr(tok, name, value)
    size = {"shortest_edge": pre["min_pixels"], "longest_edge": pre["max_pixels"]}
    common = dict(size=size, **{k: pre[k] for k in ("patch_size", "temporal_patch_size", "merge_size", "image_mean",
                                                    "image_std", "rescale_factor")})
    return transformers.Qwen3OmniMoeProcessor(image_processor=transformers.Qwen2VLImageProcessor(**common),
                                              video_processor=transformers.Qwen2VLVideoProcessor(**common),
                                              feature_extractor=fe, tokenizer=tok), pre, size


def case_inputs(processor, case, seed, size):
    """The processor's inputs for one case and media seed: (inputs, media, waveform or None, "image" or
    "video", get_rope_index's extra arguments, the thinker's extra arguments)."""
    import numpy as np
    import torch

    import qwen3_omni_audio_reference as audio_ref

    if "images" in case:
        media = [picture(h, w, seed + k, np) for k, (h, w) in enumerate(case["images"])]
        inputs = processor(text=case["text"], images=media, return_tensors="pt", **case.get("mm_processor_kwargs", {}))
        return inputs, media, None, "image", {}, {}
    media = [video_frames(*case["video"], seed, np)]
    videos_kwargs = dict(fps=case["fps"], do_sample_frames=False, size=size)
    wave, audio = None, {}
    if "audio_samples" in case:
        wave = audio_ref.waveform(case["audio_samples"], seed, np)
        videos_kwargs["use_audio_in_video"] = True
        audio = dict(audio=[wave])
    inputs = processor(text=case["text"], videos=media, return_tensors="pt", videos_kwargs=videos_kwargs, **audio)
    extra = dict(second_per_grids=torch.tensor(inputs["video_second_per_grid"]).float())
    forward_extra = {}
    if wave is not None:
        extra.update(use_audio_in_video=True, audio_seqlens=inputs["feature_attention_mask"].sum(-1))
        forward_extra = dict(use_audio_in_video=True)
    return inputs, media, wave, "video", extra, forward_extra


def run(checkpoint, out):
    import numpy as np
    import torch
    import transformers

    import make_tiny_qwen3_omni as tiny
    import qwen3_omni_audio_reference as audio_ref

    model = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        checkpoint, attn_implementation="eager", dtype=torch.float32).eval()
    thinker = model.thinker
    processor, pre, size = make_processor(checkpoint, transformers)
    cases, failed = [], []
    for c, case in enumerate(CASES):
        try:
            for seed in range(SEED + 1000 * c, SEED + 1000 * c + SEED_ATTEMPTS):
                inputs, media, wave, kind, extra, forward_extra = case_inputs(processor, case, seed, size)
                pixels, grid = inputs[f"pixel_values{'' if kind == 'image' else '_videos'}"], inputs[f"{kind}_grid_thw"]
                ids = inputs["input_ids"]
                margins, handles = tiny.routing_margins(model, torch)
                with torch.no_grad():
                    positions, delta = thinker.get_rope_index(input_ids=ids, attention_mask=inputs["attention_mask"],
                                                              **{f"{kind}_grid_thw": grid}, **extra)
                    vis = thinker.visual(pixels.float(), grid_thw=grid)
                    embeds, deepstack = (vis[0], vis[1]) if isinstance(vis, tuple) else (vis.pooler_output,
                                                                                         vis.deepstack_features)
                    logits = thinker(**inputs, **forward_extra).logits[0]
                    seq, generated, step_margins = dict(inputs), [], []
                    for _ in range(NEW_TOKENS):
                        top = torch.topk(thinker(**seq, **forward_extra).logits[0, -1], 2)
                        step_margins.append(float(top.values[0] - top.values[1]))
                        generated.append(int(top.indices[0]))
                        seq["input_ids"] = torch.cat([seq["input_ids"], top.indices[:1].view(1, 1)], dim=1)
                        seq["attention_mask"] = torch.ones_like(seq["input_ids"])
                for h in handles:
                    h.remove()
                print(f"case {c} seed {seed}: greedy margin {min(step_margins):.3e}, routing gap {min(margins):.3e}")
                if min(step_margins) > tiny.MIN_LOGIT_MARGIN and min(margins) > tiny.MIN_ROUTING_GAP:
                    break
            else:
                raise RuntimeError(f"case {c}: no seed gives clear margins")
            grids = grid.tolist()
            assert embeds.shape[0] == sum(t * h * w for t, h, w in grids) // pre["merge_size"] ** 2, grids
            d = os.path.join(out, f"case_{c}")
            os.makedirs(d)
            files = dict(pixel_values=pixels.float(), visual_embeds=embeds, deepstack=torch.stack(list(deepstack)),
                         position_ids=positions[:, 0, :].float(), logits=logits)
            if kind == "image":
                files.update({f"image_{k}": img for k, img in enumerate(media)})
            else:
                files["frames"] = media[0]
                if wave is not None:
                    files["waveform"] = wave
            for name, value in files.items():
                np.save(os.path.join(d, name + ".npy"), np.ascontiguousarray(np.asarray(value)))
            entry = dict(text=case["text"], seed=seed, grids=grids, input_ids=ids[0].tolist(),
                         rope_delta=float(delta.reshape(-1)[0]), greedy_continuation=generated,
                         min_top2_margin=min(step_margins), min_routing_gap=min(margins))
            if kind == "video":
                entry.update(fps=case["fps"], second_per_grid=[float(x) for x in inputs["video_second_per_grid"]])
                if wave is not None:
                    lengths = inputs["feature_attention_mask"].sum(-1)
                    entry.update(use_audio_in_video=True, audio_samples=int(wave.shape[0]),
                                 feature_lengths=[int(n) for n in lengths],
                                 audio_token_counts=[int(audio_ref.audio_token_count(int(n))) for n in lengths])
            if "mm_processor_kwargs" in case:
                entry["mm_processor_kwargs"] = case["mm_processor_kwargs"]
            cases.append(entry)
            print(f"case {c}: {ids.shape[1]} tokens, grids {grids}, delta {entry['rope_delta']}, greedy {generated}")
        except Exception:  # one case's failure is reported and the others are still written
            import traceback

            traceback.print_exc()
            failed.append(c)
            cases.append(dict(error=traceback.format_exc()))
    json.dump(dict(min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"], cases=cases,
                   transformers_version=transformers.__version__, torch_version=torch.__version__),
              open(os.path.join(out, "reference.json"), "w"), indent=1)
    if failed:
        raise SystemExit(f"cases {failed} failed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", help="the tiny checkpoint (tests/data/tiny_qwen3_omni/per_expert)")
    ap.add_argument("--out", help="output folder (created; becomes tests/data/tiny_qwen3_omni/vision)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(8)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    run(args.checkpoint, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
