#!/usr/bin/env python3
"""Hugging Face reference outputs of tiny random-weight Qwen2.5-Omni thinker towers.

Run on the GPU machine (torch 2.11, transformers 5.17; float32 on the CPU, attn_implementation
"eager"). Builds transformers' Qwen2_5OmniAudioEncoder and Qwen2_5OmniVisionEncoder from tiny
configs (the shapes of src/model/qwen2_5_omni/towers_random_checkpoint.cc's tiny_tower_shapes: an
audio tower of 2 layers, d_model 32, chunks of 16 frames; a ViT of 3 blocks, hidden 32, 2 x 2 block
windows and full attention in block 1), re-draws every weight from a seed (the default init, std
0.02, makes the rows nearly constant), and writes into OUT (tests/data/tiny_qwen2_5_omni/towers):

    checkpoint/config.json             model_type qwen2_5_omni, thinker_config.{audio,vision}_config
    checkpoint/model.safetensors       thinker.audio_tower.* and thinker.visual.* in float32
    checkpoint/preprocessor_config.json  the released processor settings (Whisper features of 128
                                       mel bins padded to 300 s; Qwen2-VL images of 14-pixel patches)
    waveform_<k>.npy                   audio k, float32 mono at 16 kHz
    input_features_<k>.npy             its log-mel features, valid frames only [128, frames]
    audio_rows.npy                     the audio tower's rows for the audios together [rows, 48]
    image_<k>.npy                      image k, uint8 [height, width, 3]
    image_pixel_values.npy             the image processor's patches for both images [patches, 1176]
    image_rows.npy                     the vision encoder's merged rows for both images [rows, 48]
    video_frames.npy                   the video's frames, uint8 [2, height, width, 3]
    video_pixel_values.npy             the video processor's patches (the omni processor's video
                                       size: 128 to 768 merge blocks) [patches, 1176]
    video_rows.npy                     the vision encoder's rows for the video
    reference.json                     samples, valid frames (the feature attention mask), rows per
                                       audio; image and video grids (t, h, w); versions

The audios are 0.37 s (37 frames: chunks of 16, 16 and 5), 0.16 s (16 frames: exactly one chunk)
and 1.234 s (124 frames: 8 chunks); the images 90 x 150 (resized to 84 x 140: windows cut at the
right and bottom edges) and 60 x 60 (56 x 56: one window); the video 2 frames of 70 x 100 (resized
up to 280 x 392 by the video processor's minimum). The audios go through WhisperFeatureExtractor as
Qwen2_5OmniProcessor calls it (padding="max_length", return_attention_mask=True) and the tower as
Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features does (the valid frames of all audios
concatenated, feature_lens, aftercnn_lens).

Self-checks (the script fails when one does not hold): every audio's features alone equal its
features in the batch; the features of an audio zero-padded only to round_up(samples, 160) + 400
samples equal those of the 300 s padding on the valid frames (what the C++ processor relies on);
each audio's rows alone equal its rows in the batch (the chunks are independent); each image's
rows alone equal its rows in the batch; every count matches its formula.

    python3 scripts/reference/qwen2_5_omni_towers_reference.py --out tests/data/tiny_qwen2_5_omni/towers
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SEED = 20261207
SAMPLE_RATE = 16000
AUDIO_SAMPLES = [5920, 2560, 19744]
IMAGES = [(90, 150), (60, 60)]
VIDEO = (2, 70, 100)
AUDIO = dict(num_mel_bins=128, d_model=32, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
             output_dim=48, n_window=8, max_source_positions=64, activation_function="gelu", scale_embedding=False)
VISION = dict(depth=3, hidden_size=32, num_heads=2, intermediate_size=40, out_hidden_size=48, patch_size=14,
              temporal_patch_size=2, spatial_merge_size=2, in_channels=3, window_size=56, fullatt_block_indexes=[1],
              hidden_act="silu")
PREPROCESSOR = {
    "chunk_length": 300, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "hop_length": 160,
    "n_fft": 400, "n_samples": 4800000, "nb_max_frames": 30000, "padding_side": "right", "padding_value": 0.0,
    "dither": 0.0, "return_attention_mask": True, "sampling_rate": SAMPLE_RATE,
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5OmniProcessor",
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "resample": 3,
    "rescale_factor": 1.0 / 255.0, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711], "min_pixels": 3136, "max_pixels": 12845056,
    "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
# Qwen2_5OmniProcessor's default video size.
VIDEO_SIZE = {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}
TOLERANCE = 1e-5


def redraw(model, torch, seed):
    """Every parameter re-drawn: norms' scales about 1, biases small, products scaled by 1/sqrt(fan_in)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                value = (0.1 * torch.randn(p.shape, generator=gen) if name.endswith("bias")
                         else 1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "audio_bos_eos_token" in name:
                value = torch.randn(p.shape, generator=gen)
            else:
                value = torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5
            p.copy_(value)


def close(a, b):
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and float(np.max(np.abs(a - b))) <= TOLERANCE * max(1.0, float(np.max(np.abs(b))))


def run(out):
    import numpy as np
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni as m
    from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import (Qwen2_5OmniAudioEncoderConfig,
                                                                              Qwen2_5OmniVisionEncoderConfig)

    import qwen3_omni_audio_reference as audio_ref
    import qwen3_omni_vision_reference as vision_ref

    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("FAILED:", what)

    audio_cfg = Qwen2_5OmniAudioEncoderConfig(**AUDIO)
    vision_cfg = Qwen2_5OmniVisionEncoderConfig(**VISION)
    torch.manual_seed(SEED)
    audio_tower = m.Qwen2_5OmniAudioEncoder._from_config(audio_cfg, attn_implementation="eager").float().eval()
    visual = m.Qwen2_5OmniVisionEncoder._from_config(vision_cfg, attn_implementation="eager").float().eval()
    redraw(audio_tower, torch, SEED)
    redraw(visual, torch, SEED + 1)

    ckpt = os.path.join(out, "checkpoint")
    os.makedirs(ckpt)
    tensors = {f"thinker.audio_tower.{k}": v.contiguous() for k, v in audio_tower.state_dict().items()}
    tensors.update({f"thinker.visual.{k}": v.contiguous() for k, v in visual.state_dict().items()})
    save_file(tensors, os.path.join(ckpt, "model.safetensors"), metadata={"format": "pt"})
    config = dict(architectures=["Qwen2_5OmniModel"], model_type="qwen2_5_omni",
                  thinker_config=dict(audio_config=audio_cfg.to_dict(), vision_config=vision_cfg.to_dict()))
    json.dump(config, open(os.path.join(ckpt, "config.json"), "w"), indent=1)
    json.dump(PREPROCESSOR, open(os.path.join(ckpt, "preprocessor_config.json"), "w"), indent=1)
    save = lambda name, value: np.save(os.path.join(out, name + ".npy"), np.ascontiguousarray(np.asarray(value)))

    # Audio: the processor's features, the tower over all audios together.
    pre = PREPROCESSOR
    fe = transformers.WhisperFeatureExtractor(feature_size=pre["feature_size"], sampling_rate=pre["sampling_rate"],
                                              hop_length=pre["hop_length"], chunk_length=pre["chunk_length"],
                                              n_fft=pre["n_fft"], padding_value=pre["padding_value"],
                                              dither=pre["dither"], return_attention_mask=True)
    check(fe.n_samples == pre["n_samples"], f"n_samples {fe.n_samples}")
    waves = [audio_ref.waveform(n, SEED + k, np) for k, n in enumerate(AUDIO_SAMPLES)]
    feats = fe(waves, sampling_rate=SAMPLE_RATE, padding="max_length", return_attention_mask=True,
               return_tensors="pt")
    features, mask = feats["input_features"], feats["attention_mask"]
    lengths = mask.sum(-1)
    check(lengths.tolist() == [-(-n // 160) for n in AUDIO_SAMPLES], f"valid frames {lengths.tolist()}")
    for k, (w, n) in enumerate(zip(waves, lengths.tolist())):
        save(f"waveform_{k}", w)
        save(f"input_features_{k}", features[k, :, :n].numpy())
        alone = fe([w], sampling_rate=SAMPLE_RATE, padding="max_length", return_attention_mask=True,
                   return_tensors="pt")["input_features"][0, :, :n]
        check(close(alone, features[k, :, :n]), f"audio {k}: features alone differ from the batch")
        short = -(-len(w) // 160) * 160 + 400
        padded = np.concatenate([w, np.zeros(short - len(w), np.float32)])
        few = fe([padded], sampling_rate=SAMPLE_RATE, padding="longest", return_attention_mask=True,
                 return_tensors="pt")["input_features"][0, :, :n]
        check(close(few, features[k, :, :n]), f"audio {k}: a short zero padding changes the valid frames")

    def tower(ks):
        sel = [features[k, :, :lengths[k]] for k in ks]
        feature_lens = lengths[ks]
        aftercnn, _ = audio_tower._get_feat_extract_output_lengths(feature_lens)
        with torch.no_grad():
            return audio_tower(torch.cat(sel, dim=1), feature_lens=feature_lens,
                               aftercnn_lens=aftercnn).last_hidden_state

    every = list(range(len(waves)))
    audio_rows = tower(every)
    _, counts = audio_tower._get_feat_extract_output_lengths(lengths)
    counts = counts.tolist()
    check(counts == [(((n - 1) // 2 + 1) - 2) // 2 + 1 for n in lengths.tolist()], f"rows per audio {counts}")
    check(audio_rows.shape == (sum(counts), AUDIO["output_dim"]), f"audio rows {tuple(audio_rows.shape)}")
    first = 0
    for k in every:
        check(close(tower([k]), audio_rows[first:first + counts[k]]), f"audio {k}: rows alone differ from the batch")
        first += counts[k]
    save("audio_rows", audio_rows.numpy())

    # Vision: the Qwen2-VL processors of preprocessor_config.json's fields, the encoder per medium set.
    common = dict(size={"shortest_edge": PREPROCESSOR["min_pixels"], "longest_edge": PREPROCESSOR["max_pixels"]},
                  **{k: PREPROCESSOR[k] for k in ("patch_size", "temporal_patch_size", "merge_size", "image_mean",
                                                  "image_std", "rescale_factor")})
    image_processor = transformers.Qwen2VLImageProcessor(**common)
    video_processor = transformers.Qwen2VLVideoProcessor(**common)

    def encode(pixels, grid):
        with torch.no_grad():
            result = visual(pixels, grid_thw=grid)
        return getattr(result, "pooler_output", result)

    images = [vision_ref.picture(h, w, SEED + 10 + k, np) for k, (h, w) in enumerate(IMAGES)]
    for k, img in enumerate(images):
        save(f"image_{k}", img)
    im = image_processor(images=images, return_tensors="pt")
    image_grids = im["image_grid_thw"]
    image_rows = encode(im["pixel_values"], image_grids)
    blocks = [int(t * h * w) // 4 for t, h, w in image_grids.tolist()]
    check(image_rows.shape == (sum(blocks), VISION["out_hidden_size"]), f"image rows {tuple(image_rows.shape)}")
    first_patch, first_row = 0, 0
    for k, g in enumerate(image_grids.tolist()):
        n = g[0] * g[1] * g[2]
        alone = encode(im["pixel_values"][first_patch:first_patch + n], image_grids[k:k + 1])
        check(close(alone, image_rows[first_row:first_row + blocks[k]]), f"image {k}: rows alone differ")
        first_patch += n
        first_row += blocks[k]
    save("image_pixel_values", im["pixel_values"].numpy())
    save("image_rows", image_rows.numpy())

    frames = vision_ref.video_frames(*VIDEO, SEED + 20, np)
    save("video_frames", frames)
    vid = video_processor(videos=[frames], size=VIDEO_SIZE, do_sample_frames=False, return_tensors="pt")
    video_grids = vid["video_grid_thw"]
    video_rows = encode(vid["pixel_values_videos"], video_grids)
    check(video_rows.shape[0] == int(video_grids.prod()) // 4, f"video rows {tuple(video_rows.shape)}")
    save("video_pixel_values", vid["pixel_values_videos"].numpy())
    save("video_rows", video_rows.numpy())

    json.dump(dict(audio_samples=AUDIO_SAMPLES, audio_valid_frames=lengths.tolist(), audio_rows_per_audio=counts,
                   image_sizes=IMAGES, image_grids=image_grids.tolist(), video_frames=list(VIDEO),
                   video_grid=video_grids[0].tolist(), video_size=VIDEO_SIZE,
                   transformers_version=transformers.__version__, torch_version=torch.__version__),
              open(os.path.join(out, "reference.json"), "w"), indent=1)
    if failures:
        raise SystemExit(f"{len(failures)} self-checks failed: {failures}")
    print("all self-checks passed; wrote", out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="output folder (created; becomes tests/data/tiny_qwen2_5_omni/towers)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(8)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    run(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
