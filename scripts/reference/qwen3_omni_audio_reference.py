#!/usr/bin/env python3
"""Hugging Face reference outputs of the tiny Qwen3-Omni thinker for prompts with audio.

Run on the GPU machine (torch 2.11, transformers 5.17; float32 on the CPU, attn_implementation
"eager") over the checkpoint that make_tiny_qwen3_omni.py made (tests/data/tiny_qwen3_omni/
per_expert, which holds a random-weight audio tower and preprocessor_config.json). Every case is
one chat prompt with audio, run through Qwen3OmniMoeProcessor (WhisperFeatureExtractor's log-mel
features, the <|audio_pad|> expansion, the tokenizer) and the thinker of
Qwen3OmniMoeForConditionalGeneration:

    case_<c>/waveform_<k>.npy      the k-th audio of the prompt, float32 mono at 16 kHz
    case_<c>/input_features.npy    the processor's features [audios, 128, frames] (padded to the longest)
    case_<c>/feature_mask.npy      its feature_attention_mask [audios, frames] (int32)
    case_<c>/audio_features.npy    the audio tower's output for all audios, concatenated [tokens, hidden]
    case_<c>/position_ids.npy      get_rope_index's positions [3, prompt] (int32)
    case_<c>/logits.npy            thinker logits at every prompt position [prompt, vocab]
    reference.json                 per case: the prompt text, the token ids after expansion, the
                                   feature lengths, the audio token counts, the rope delta, the
                                   16-token greedy continuation (argmax over the full sequence at each
                                   step) and its smallest top-1/top-2 margin

Case 0 has one audio (1.2345 s, not a whole number of 10 ms hops); case 1 has two (9.371875 s,
which crosses the 104-token attention window of n_window_infer 800, and the 1.2345 s one, which is
padded to the longer one as the processor pads a batch: its feature count is then ceil(samples /
hop), one more than alone). Texts and waveform seeds are tried in order until every greedy step's
margin clears 2e-3 and every routing decision's gap 2e-5.

    python3 scripts/reference/qwen3_omni_audio_reference.py \
        --checkpoint tests/data/tiny_qwen3_omni/per_expert --out DIR/audio
    python3 scripts/reference/qwen3_omni_audio_reference.py --self-test   # torch-free checks
"""
import argparse
import json
import os
import shutil
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SAMPLE_RATE = 16000
SHORT = 19752  # 1.2345 s: 123.45 hops
LONG = 149950  # 9.371875 s: 937.19 hops -> 937 frames, 9 whole 100-frame chunks + 37
TWO_AUDIOS = ("<|audio_start|><|audio_pad|><|audio_end|>and<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\n"
              "<|im_start|>assistant\n")
# Each case's candidate texts, tried in order (with SEED_ATTEMPTS waveform seeds each) until the
# margins clear: the tokens before the first audio do not depend on the waveform, so a near tie
# there needs another text.
CASES = [
    dict(audios=[SHORT], texts=["<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>What is it?<|im_end|>\n"
                                "<|im_start|>assistant\n"]),
    dict(audios=[LONG, SHORT], texts=[f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{TWO_AUDIOS}"
                                      for system in ("Be brief.", "Listen.", "Answer well.", "Hi there.")]
         + [f"<|im_start|>user\n{TWO_AUDIOS}"]),
]
NEW_TOKENS = 16
WAVE_SEED = 20261203
SEED_ATTEMPTS = 8
TOKEN_ATTRIBUTES = dict(audio_token="<|audio_pad|>", image_token="<|image_pad|>", video_token="<|video_pad|>",
                        vision_bos_token="<|vision_start|>", vision_eos_token="<|vision_end|>",
                        audio_bos_token="<|audio_start|>", audio_eos_token="<|audio_end|>")


def audio_token_count(frames):
    """The audio tower's output length for `frames` mel frames (n_window 50)."""
    leave = frames % 100
    feat = (leave - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (frames // 100) * 13


def self_test():
    assert audio_token_count(937) == 122 and audio_token_count(123) == 16 and audio_token_count(124) == 16
    assert audio_token_count(100) == 13 and audio_token_count(1) == 1
    for case in CASES:
        assert all(text.count("<|audio_pad|>") == len(case["audios"]) for text in case["texts"])
    assert LONG // 160 >= 8 * 100, "the long audio must cross one attention window (8 chunks)"
    print("self-test passed")


def waveform(n, seed, np):
    """A deterministic test signal: a chirp and a tone under an envelope, with noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SAMPLE_RATE
    f0, f1 = rng.uniform(100, 400), rng.uniform(1500, 6000)
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t ** 2 / (2 * max(t[-1], 1e-3)))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.5, 3.0) * t) ** 2
    x = 0.3 * env * np.sin(phase) + 0.1 * np.sin(2 * np.pi * rng.uniform(200, 900) * t)
    x += 0.03 * rng.standard_normal(n)
    return x.astype(np.float32)


def make_processor(checkpoint, log):
    """Qwen3OmniMoeProcessor from the checkpoint's files: the feature extractor from
    preprocessor_config.json, the tokenizer from vocab.json/merges.txt, Qwen2-VL image and video
    processors (the expansion reads their merge_size)."""
    import transformers
    from transformers import AutoTokenizer, Qwen3OmniMoeProcessor, WhisperFeatureExtractor

    with open(os.path.join(checkpoint, "preprocessor_config.json")) as f:
        pre = json.load(f)
    fe = WhisperFeatureExtractor(feature_size=pre["feature_size"], sampling_rate=pre["sampling_rate"],
                                 hop_length=pre["hop_length"], chunk_length=pre["chunk_length"], n_fft=pre["n_fft"],
                                 padding_value=pre["padding_value"], dither=pre.get("dither", 0.0),
                                 return_attention_mask=True)
    tok = AutoTokenizer.from_pretrained(checkpoint)
    for name, value in TOKEN_ATTRIBUTES.items():
        if getattr(tok, name, None) != value:
            log.write(f"tokenizer.{name} set to {value}\n")
            setattr(tok, name, value)
    image = video = None
    for cls in ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast"):
        if hasattr(transformers, cls):
            image = getattr(transformers, cls)(patch_size=16, temporal_patch_size=2, merge_size=2)
            break
    for cls in ("Qwen2VLVideoProcessor", "Qwen3VLVideoProcessor"):
        if hasattr(transformers, cls):
            video = getattr(transformers, cls)(patch_size=16, temporal_patch_size=2, merge_size=2)
            break
    try:
        processor = Qwen3OmniMoeProcessor(image_processor=image, video_processor=video, feature_extractor=fe,
                                          tokenizer=tok)
        log.write("processor: Qwen3OmniMoeProcessor\n")
    except Exception as e:  # the same steps, called one by one (the processor's own expansion code)
        log.write(f"Qwen3OmniMoeProcessor could not be built ({e!r}); calling its parts\n")
        merge = types.SimpleNamespace(merge_size=2)
        shim = types.SimpleNamespace(image_processor=merge, video_processor=merge, **TOKEN_ATTRIBUTES)

        def processor(text, audio, return_tensors):
            out = fe(audio, sampling_rate=SAMPLE_RATE, padding=True, truncation=False, return_attention_mask=True,
                     return_tensors=return_tensors)
            lengths = iter(audio_token_count(out["attention_mask"].sum(-1)))
            text = Qwen3OmniMoeProcessor.replace_multimodal_special_tokens(shim, [text], lengths, iter([]), iter([]),
                                                                            iter([]), False, 13.0, 2.0)
            enc = tok(text, return_tensors=return_tensors)
            return dict(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                        input_features=out["input_features"], feature_attention_mask=out["attention_mask"])
    return processor, fe, tok


def run(checkpoint, out, log):
    import numpy as np
    import torch
    import transformers
    from transformers import Qwen3OmniMoeForConditionalGeneration

    import make_tiny_qwen3_omni as tiny

    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(checkpoint, attn_implementation="eager",
                                                                 dtype=torch.float32).eval()
    thinker = model.thinker
    processor, fe, tok = make_processor(checkpoint, log)
    vocab = thinker.config.text_config.vocab_size
    cases = []
    for c, case in enumerate(CASES):
        for attempt in range(SEED_ATTEMPTS * len(case["texts"])):
            text = case["texts"][attempt // SEED_ATTEMPTS]
            seed = WAVE_SEED + 1000 * c + attempt
            waves = [waveform(n, seed + k, np) for k, n in enumerate(case["audios"])]
            inputs = processor(text=text, audio=waves, return_tensors="pt")
            ids = inputs["input_ids"]
            feats, fmask = inputs["input_features"].float(), inputs["feature_attention_mask"]
            lengths = fmask.sum(-1)
            margins, handles = tiny.routing_margins(model, torch)
            with torch.no_grad():
                audio = thinker.get_audio_features(feats, fmask, return_dict=True).last_hidden_state
                positions, delta = thinker.get_rope_index(ids, None, None, inputs["attention_mask"], False, lengths, None)
                logits = thinker(input_ids=ids, attention_mask=inputs["attention_mask"], input_features=feats,
                                 feature_attention_mask=fmask).logits[0]
                seq, generated, step_margins = ids, [], []
                for _ in range(NEW_TOKENS):
                    last = thinker(input_ids=seq, attention_mask=torch.ones_like(seq), input_features=feats,
                                   feature_attention_mask=fmask).logits[0, -1]
                    top = torch.topk(last, 2)
                    step_margins.append(float(top.values[0] - top.values[1]))
                    generated.append(int(top.indices[0]))
                    seq = torch.cat([seq, torch.tensor([[generated[-1]]])], dim=1)
            for h in handles:
                h.remove()
            log.write(f"case {c} text {attempt // SEED_ATTEMPTS} seed {seed}: min greedy margin {min(step_margins):.3e}, min routing gap "
                      f"{min(margins):.3e}\n")
            if min(step_margins) > tiny.MIN_LOGIT_MARGIN and min(margins) > tiny.MIN_ROUTING_GAP:
                break
        else:
            raise SystemExit(f"case {c}: no waveform seed gives clear margins")
        counts = [int(audio_token_count(int(n))) for n in lengths]
        assert int((ids == thinker.config.audio_token_id).sum()) == sum(counts) == audio.shape[0], counts
        assert logits.shape == (ids.shape[1], vocab), logits.shape
        d = os.path.join(out, f"case_{c}")
        os.makedirs(d)
        for k, w in enumerate(waves):
            np.save(os.path.join(d, f"waveform_{k}.npy"), w)
        np.save(os.path.join(d, "input_features.npy"), feats.numpy().astype(np.float32))
        np.save(os.path.join(d, "feature_mask.npy"), fmask.numpy().astype(np.int32))
        np.save(os.path.join(d, "audio_features.npy"), audio.numpy().astype(np.float32))
        np.save(os.path.join(d, "position_ids.npy"), np.ascontiguousarray(positions[:, 0, :].numpy().astype(np.int32)))
        np.save(os.path.join(d, "logits.npy"), logits.numpy().astype(np.float32))
        cases.append(dict(text=text, samples=case["audios"], waveform_seed=seed,
                          input_ids=ids[0].tolist(), feature_lengths=[int(n) for n in lengths],
                          audio_token_counts=counts, rope_delta=int(delta.reshape(-1)[0]),
                          greedy_continuation=generated, min_top2_margin=min(step_margins),
                          min_routing_gap=min(margins), feature_shape=list(feats.shape)))
        log.write(f"case {c}: {ids.shape[1]} prompt tokens, feature lengths {cases[-1]['feature_lengths']}, "
                  f"audio tokens {counts}, features {list(feats.shape)}, greedy {generated}\n")
    reference = dict(checkpoint=os.path.basename(os.path.normpath(checkpoint)), sample_rate=SAMPLE_RATE, cases=cases,
                     transformers_version=transformers.__version__, torch_version=torch.__version__)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", help="the tiny checkpoint (tests/data/tiny_qwen3_omni/per_expert)")
    ap.add_argument("--out", help="output folder (created; becomes tests/data/tiny_qwen3_omni/audio)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    self_test()
    if args.self_test:
        return 0
    import torch

    torch.set_num_threads(8)
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    log_path = os.path.join(args.out, "reference.log")
    try:
        with open(log_path, "w") as log:
            try:
                run(args.checkpoint, args.out, log)
            except Exception:
                import traceback

                log.write(traceback.format_exc())
                raise
    finally:
        print(open(log_path).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
