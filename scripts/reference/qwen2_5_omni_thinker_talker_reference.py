#!/usr/bin/env python3
"""Builds a tiny random-weight Qwen2_5OmniForConditionalGeneration (enable_audio_output true) and
the reference outputs of transformers 5.17's thinker and talker on it (CPU, float32, eager).

    python3 scripts/reference/qwen2_5_omni_thinker_talker_reference.py \
        --out tests/data/tiny_qwen2_5_omni/thinker_talker
    python3 scripts/reference/qwen2_5_omni_thinker_talker_reference.py --self-test   # torch-free

The tokenizer files are make_tiny_qwen3_omni.py's byte-level tokenizer (beside this file; no
internet): the chat is written as ids directly ('<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>
assistant\\n'), so no chat template runs. The thinker and talker ids point at ids < the tiny vocab.

--out writes: config.json, model.safetensors (save_pretrained), the tokenizer files, and
  reference.json    input_ids, positions ([3 * L] of get_rope_index), reply (greedy thinker tokens,
                    the last one included), speaker_bos, codes (greedy talker codes before the first
                    stop code), rope_cases (get_rope_index on synthetic image/video/audio prompts,
                    with and without use_audio_in_video: prompt_ids, input_ids, grids, audio_rows,
                    positions, rope_delta)
  thinker_prompt_logits.npy  float32 [L, vocab]
  talker_prompt_embeds.npy   float32 [L + 2, thinker hidden]: the talker's first inputs_embeds
                             (before thinker_to_talker_proj, codec bos/pad embeddings added)
  talker_prefill_logits.npy  float32 [L + 2, codec vocab]
Every assumption is an assert: generate's codes must equal the hand-driven greedy loop's.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_qwen3_omni as tok  # noqa: E402

SEED = 20261211
VOCAB = 320
IDS = dict(audio=300, audio_bos=301, audio_eos=302, image=303, video=304, vision_bos=305, vision_eos=306,
           text_bos=307, text_eos=308, text_pad=309, speaker_bos=310)
CODEC = dict(vocab=48, pad=40, bos=41, eos=42, mask=43)
SECTION = [2, 3, 3]


def decoder(hidden, layers, heads, kv, head_dim, inter, vocab):
    return dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, head_dim=head_dim, intermediate_size=inter, hidden_act="silu",
                rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=False, use_sliding_window=False,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=SECTION))


def config_dict(im_end):
    text = decoder(48, 2, 4, 2, 16, 96, VOCAB)
    text["eos_token_id"] = im_end
    thinker = dict(text_config=text, audio_token_index=IDS["audio"], image_token_index=IDS["image"],
                   video_token_index=IDS["video"], audio_start_token_id=IDS["audio_bos"],
                   audio_end_token_id=IDS["audio_eos"], vision_start_token_id=IDS["vision_bos"],
                   vision_end_token_id=IDS["vision_eos"], position_id_per_seconds=25, seconds_per_chunk=2,
                   audio_config=dict(d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
                                     num_mel_bins=16, output_dim=48, n_window=4),
                   vision_config=dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=32, out_hidden_size=48,
                                      fullatt_block_indexes=[0], window_size=28, spatial_merge_size=2))
    talker = decoder(32, 2, 4, 2, 16, 64, CODEC["vocab"])
    talker.update(embedding_size=48, tts_text_start_token_id=IDS["text_bos"], tts_text_end_token_id=IDS["text_eos"],
                  tts_text_pad_token_id=IDS["text_pad"], tts_codec_pad_token_id=CODEC["pad"],
                  tts_codec_start_token_id=CODEC["bos"], tts_codec_end_token_id=CODEC["eos"],
                  tts_codec_mask_token_id=CODEC["mask"], audio_token_index=IDS["audio"],
                  image_token_index=IDS["image"], video_token_index=IDS["video"],
                  vision_start_token_id=IDS["vision_bos"], audio_start_token_id=IDS["audio_bos"],
                  audio_end_token_id=IDS["audio_eos"], position_id_per_seconds=25, seconds_per_chunk=2,
                  spatial_merge_size=2)
    return dict(thinker_config=thinker, talker_config=talker, enable_audio_output=True,
                token2wav_config=dict(dit_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                      head_dim=16, num_embeds=CODEC["vocab"], mel_dim=20,
                                                      enc_emb_dim=12, enc_dim=8, enc_channels=[16, 16, 48],
                                                      enc_kernel_sizes=[3, 3, 1], enc_dilations=[1, 1, 1]),
                                      bigvgan_config=dict(mel_dim=20, upsample_initial_channel=32,
                                                          upsample_rates=[5, 3, 2], upsample_kernel_sizes=[11, 7, 4])))


def rope_cases():
    """Synthetic expanded prompts: (name, prompt_ids, grids, audio rows, use_audio_in_video)."""
    a, ab, ae, im, vi, vb, ve = (IDS[k] for k in ("audio", "audio_bos", "audio_eos", "image", "video", "vision_bos",
                                                    "vision_eos"))
    return [
        ("image", [5, vb, im, ve, 6, 7], [[1, 4, 6]], [], [], [], False),
        ("audio_and_video", [ab, a, ae, vb, vi, ve, 8], [], [[3, 2, 2]], [2.0], [2], False),
        ("two_images_audio", [vb, im, ve, ab, a, ae, vb, im, ve, 9], [[1, 2, 2], [1, 4, 4]], [], [], [7], False),
        ("video_with_audio", [9, vb, vi, ve, 10], [], [[4, 2, 2]], [1.0], [60], True),
        ("video_with_audio_fractional", [vb, vi, ve], [], [[5, 4, 2]], [2 / 1.5], [90], True),
    ]


def self_test():
    vocab, _, config, specials = tok.tokenizer_files()
    assert max(specials.values()) < min(IDS.values()) < VOCAB, specials
    assert sum(SECTION) * 2 == 16
    assert max(CODEC.values()) < CODEC["vocab"] or CODEC["vocab"] in CODEC.values()
    assert len(rope_cases()) == 5
    print("self-test ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    import numpy as np
    import torch
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    torch.manual_seed(SEED)
    vocab, _, _, specials = tok.tokenizer_files()
    im_start, im_end = specials["<|im_start|>"], specials["<|im_end|>"]
    config = Qwen2_5OmniConfig(**config_dict(im_end))
    config._attn_implementation = "eager"
    model = Qwen2_5OmniForConditionalGeneration(config).float().eval()
    with torch.no_grad():  # larger weights than the 0.02 init so that argmax is meaningful
        for name, p in model.named_parameters():
            if name.startswith(("thinker.model", "thinker.lm_head", "talker")) and p.dim() == 2:
                p.normal_(0.0, 1.0 if "embed_tokens" in name else p.shape[1] ** -0.5 * 2)
    cond = torch.randn(12)
    model.speaker_map = {"Chelsie": {"cond": cond, "ref_mel": torch.randn(1, 8, 20), "bos_token": IDS["speaker_bos"]}}
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.write_tokenizer(args.out)

    ids = [im_start] + list(b"user\nHi") + [im_end, ord("\n"), im_start, vocab["assistant"], ord("\n")]
    input_ids = torch.tensor([ids])
    mask = torch.ones_like(input_ids)
    thinker = model.thinker
    positions, delta = thinker.get_rope_index(input_ids, None, None, mask)
    assert int(delta) == 0 and torch.equal(positions[0, 0], torch.arange(len(ids)))
    with torch.no_grad():
        logits = thinker(input_ids=input_ids, attention_mask=mask).logits[0].float().numpy()
    np.save(os.path.join(args.out, "thinker_prompt_logits.npy"), logits.astype(np.float32))

    # generate, greedy on both sides; capture the talker's first call.
    captured = {}
    orig = model.talker.forward

    def spy(*a, **k):
        out = orig(*a, **k)
        if "prefill" not in captured:
            captured["prefill"] = (k["inputs_embeds"].detach().clone(), out.logits[0].detach().clone())
        return out

    model.talker.forward = spy
    with torch.no_grad():
        seq, _ = model.generate(input_ids=input_ids, attention_mask=mask, speaker="Chelsie", thinker_do_sample=False,
                                thinker_max_new_tokens=12, talker_do_sample=False, talker_max_new_tokens=24,
                                talker_eos_token_id=[CODEC["pad"], CODEC["eos"]], token2wav_num_steps=2)
    reply = seq[0, len(ids):].tolist()
    embeds, talker_logits = captured["prefill"]
    # The captured embeds were modified in place by the talker (codec bos/pad added): as C++ builds them.
    np.save(os.path.join(args.out, "talker_prompt_embeds.npy"), embeds[0].float().numpy())
    np.save(os.path.join(args.out, "talker_prefill_logits.npy"), talker_logits.float().numpy())
    assert embeds.shape[1] == len(ids) + 2, embeds.shape
    model.talker.forward = orig
    codes = []
    emb = model.talker.get_input_embeddings()
    ref = dict(input_ids=ids, positions=positions[:, 0].reshape(-1).tolist(), reply=reply,
               speaker_bos=IDS["speaker_bos"], rope_cases=[], versions=dict(torch=torch.__version__))
    # Talker codes: greedy loop over the captured prompt through the public forward.
    with torch.no_grad():
        from transformers import DynamicCache
        cache = DynamicCache(config=model.talker.config)
        text_ids = torch.tensor([ids + [IDS["speaker_bos"], reply[0]]])
        prompt_embeds = embeds.clone()
        out = model.talker.model(inputs_embeds=model.talker.thinker_to_talker_proj(prompt_embeds),
                                 past_key_values=cache, use_cache=True)
        lg = model.talker.codec_head(out.last_hidden_state)[0, -1]
        assert torch.allclose(lg, talker_logits[-1], atol=1e-5)
        hidden = thinker(input_ids=torch.tensor([ids + reply[:-1]]), output_hidden_states=True)
        rows = (hidden.hidden_states[0] + hidden.hidden_states[-1])[0, len(ids) + 1:]
        tail = torch.cat([rows, thinker.get_input_embeddings()(torch.tensor([IDS["text_eos"], IDS["text_pad"]]))])
        pos = len(ids) + 2
        for step in range(24):
            lg = lg.clone()
            lg[CODEC["bos"]] = -float("inf")
            code = int(lg.argmax())
            if code in (CODEC["pad"], CODEC["eos"]):
                break
            codes.append(code)
            row = emb(torch.tensor([code])) + tail[min(step, len(tail) - 1)]
            p = torch.full((3, 1, 1), pos)
            out = model.talker.model(inputs_embeds=model.talker.thinker_to_talker_proj(row[None]),
                                     past_key_values=cache, use_cache=True, position_ids=p)
            lg = model.talker.codec_head(out.last_hidden_state)[0, -1]
            pos += 1
    ref["codes"] = codes
    for name, prompt, images, videos, spg, audio_rows, aiv in rope_cases():
        proc_ids = expand(prompt, images, videos, spg, audio_rows, aiv)
        feat = [4 * n - 1 for n in audio_rows]  # feature lengths whose ((L-1)//2+1-2)//2+1 = n
        assert all(((f - 1) // 2 + 1 - 2) // 2 + 1 == n for f, n in zip(feat, audio_rows))
        pos3, d = thinker.get_rope_index(torch.tensor([proc_ids]), torch.tensor(images) if images else None,
                                         torch.tensor(videos) if videos else None, torch.ones(1, len(proc_ids)),
                                         aiv, torch.tensor(feat) if feat else None,
                                         torch.tensor(spg) if spg else None)
        ref["rope_cases"].append(dict(name=name, prompt_ids=prompt, input_ids=proc_ids, image_grid_thw=images,
                                      video_grid_thw=videos, video_second_per_grid=spg, audio_rows=audio_rows,
                                      use_audio_in_video=aiv, positions=pos3[:, 0].reshape(-1).tolist(),
                                      rope_delta=int(d)))
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print("wrote", args.out, "reply", reply, "codes", codes)


def expand(prompt, images, videos, spg, audio_rows, aiv):
    """Qwen2_5OmniProcessor.replace_multimodal_special_tokens on ids (merge 2)."""
    from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import Qwen2_5OmniProcessor
    import numpy as np
    chunk = Qwen2_5OmniProcessor.get_chunked_index
    out, ai, ii, vi = [], 0, 0, 0
    for k, t in enumerate(prompt):
        if t == IDS["audio"]:
            out += [t] * audio_rows[ai]
            ai += 1
        elif t == IDS["image"]:
            g = images[ii]
            ii += 1
            out += [t] * (g[0] * g[1] * g[2] // 4)
        elif t == IDS["video"]:
            g = videos[vi]
            if not aiv:
                out += [t] * (g[0] * g[1] * g[2] // 4)
            else:
                times = np.broadcast_to(np.arange(g[0]).reshape(-1, 1, 1), (g[0], g[1] // 2, g[2] // 2)).reshape(-1)
                times = times * spg[vi] * 25
                vc = chunk(None, times, 50)
                ac = chunk(None, np.arange(audio_rows[ai]), 50)
                ai += 1
                out.append(IDS["audio_bos"])
                for j in range(max(len(vc), len(ac))):
                    if j < len(vc):
                        out += [t] * (vc[j][1] - vc[j][0])
                    if j < len(ac):
                        out += [IDS["audio"]] * (ac[j][1] - ac[j][0])
                out.append(IDS["audio_eos"])
            vi += 1
        else:
            out.append(t)
    return out


if __name__ == "__main__":
    main()
