#!/usr/bin/env python3
"""Builds a tiny random-weight Qwen3-Omni checkpoint with its talker and code2wav, and the
reference outputs of transformers' speech path on it.

Run on the GPU machine (torch 2.11, transformers 5.17; float32 on the CPU, attn_implementation
"eager"). Written before it could be run here: the first run on that machine checks it (every
assumption it makes is an assert or a line in the log).

    python3 scripts/reference/qwen3_omni_speech_reference.py --out DIR/tiny_qwen3_omni_speech
    python3 scripts/reference/qwen3_omni_speech_reference.py --self-test   # torch-free checks

The thinker, tokenizer and processor files are make_tiny_qwen3_omni.py's (beside this file); the
talker and code2wav are tiny configs that keep the released structure (qwen3_omni.md: a MoE talker
with a shared expert, interleaved M-RoPE, GQA and head_dim != hidden / heads; a code predictor of
num_code_groups - 1 heads; code2wav with the released upsampling rates). The talker's vocabulary is
the codebook plus 1024, whose top 1024 ids (suppressed while generating, except end-of-speech) hold
the codec specials and speakers.

The code2wav weights are drawn as qwen3_omni_code2wav_reference.py (beside this file) draws them:
with the redraw that clears the thinker's and talker's margins, code2wav's activations grow so
large that 95% of the waveform is clipped and float32 rounding alone moves the rest by 2e-3 of the
peak; with these, float32 and float64 agree to 1e-6 and the comparison is meaningful.

Two chats run through generate (speaker Ethan, greedy): "text", a user turn "Hi", and "image", a
system turn, then a user turn with one image (random patches, grid 1 x 4 x 4: 4 rows after the
2 x 2 merge) and "Hi", so that the talker's prompt skips the system turn and its positions are
get_rope_index's 3-D ones over the talker's own ids.

--out writes:
  per_expert/          save_pretrained's layout (thinker.*, talker.*, code2wav.*), bf16, with the
                       tokenizer and processor files
  reference.json       prompt ids, the thinker's greedy reply, the talker's greedy codes
                       (frames x groups), shapes and margins, versions
  talker_prefill_embeds.npy   float32 [L, H]: the talker's prompt rows (inputs_embeds of its first call)
  talker_prefill_logits.npy   float32 [L, V]: its logits at every prompt row
  predictor_logits.npy        float32 [G - 1, codebook]: the code predictor's logits for frame 0
  codes.npy                   int32 [F, G]: the frames code2wav decoded (frame-major)
  waveform.npy                float32: code2wav(codes), what generate returned
  image/                      the image chat: pixel_values.npy (float32 [16, 1536], the patches
                              generate was given), talker_prefill_embeds.npy, talker_prefill_logits.npy,
                              talker_positions.npy (float32 [3, L]: the M-RoPE streams of the talker's
                              prefill), codes.npy, waveform.npy; reference.json's "image" entry holds
                              its prompt, grid, reply and codes
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_qwen3_omni as thinker_fixture  # noqa: E402
import qwen3_omni_code2wav_reference as code2wav_fixture  # noqa: E402

SEED = 20261207
CODEBOOK = 32
GROUPS = 4
TALKER_VOCAB = CODEBOOK + 1024
CODEC = dict(codec_pad_id=1032, codec_bos_id=1033, codec_eos_token_id=1034, codec_nothink_id=1035,
             codec_think_bos_id=1036, codec_think_eos_id=1037)
SPEAKERS = {"ethan": 1040, "chelsie": 1041}
TALKER = dict(hidden=32, layers=2, heads=4, kv_heads=2, head_dim=16, inter=48, experts=8, top_k=2, moe_inter=24,
              shared=40, mrope_section=[4, 2, 2], theta=1e6, eps=1e-6)
PREDICTOR = dict(layers=2, heads=4, kv_heads=2, head_dim=16, inter=48, theta=1e6, eps=1e-6)
CODE2WAV = dict(codebook_size=CODEBOOK, num_quantizers=GROUPS, hidden_size=32, intermediate_size=48,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, sliding_window=8,
                upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2], decoder_dim=32, rms_norm_eps=1e-5,
                layer_scale_initial_scale=0.01, max_position_embeddings=8000,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0))
THINKER_NEW_TOKENS = 8
TALKER_NEW_TOKENS = 12
IMAGE_GRID = (1, 4, 4)  # (t, h, w) patches: 4 rows after the 2 x 2 merge
IMAGE_PATCH_VALUES = 3 * 2 * 16 * 16  # channels x temporal patch x patch x patch
IMAGE_SEED_ATTEMPTS = 50
MIN_MARGIN = 2e-3


def talker_config(thinker_ids):
    t, p = TALKER, PREDICTOR
    text = dict(vocab_size=TALKER_VOCAB, hidden_size=t["hidden"], intermediate_size=t["inter"],
                num_hidden_layers=t["layers"], num_attention_heads=t["heads"], num_key_value_heads=t["kv_heads"],
                head_dim=t["head_dim"], hidden_act="silu", max_position_embeddings=512, rms_norm_eps=t["eps"],
                attention_bias=False, decoder_sparse_step=1, mlp_only_layers=[], num_experts=t["experts"],
                num_experts_per_tok=t["top_k"], moe_intermediate_size=t["moe_inter"],
                shared_expert_intermediate_size=t["shared"], norm_topk_prob=True,
                rope_parameters=dict(rope_type="default", rope_theta=t["theta"], mrope_section=t["mrope_section"],
                                     interleaved=True, mrope_interleaved=True))
    predictor = dict(vocab_size=CODEBOOK, hidden_size=t["hidden"], intermediate_size=p["inter"],
                     num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
                     num_key_value_heads=p["kv_heads"], head_dim=p["head_dim"], rms_norm_eps=p["eps"],
                     max_position_embeddings=512, num_code_groups=GROUPS,
                     rope_parameters=dict(rope_type="default", rope_theta=p["theta"]))
    ids = {k: v for k, v in thinker_ids.items() if k != "position_id_per_seconds"}
    return dict(text_config=text, code_predictor_config=predictor, num_code_groups=GROUPS,
                thinker_hidden_size=thinker_fixture.TEXT["hidden"], accept_hidden_layer=2,
                position_id_per_seconds=13, spatial_merge_size=2, speaker_id=dict(SPEAKERS), **CODEC, **ids)


def self_test():
    thinker_fixture.self_test()
    assert sum(TALKER["mrope_section"]) == TALKER["head_dim"] // 2
    assert TALKER["heads"] * TALKER["head_dim"] != TALKER["hidden"]
    assert all(TALKER_VOCAB - 1024 <= i < TALKER_VOCAB for i in list(CODEC.values()) + list(SPEAKERS.values()))
    assert CODE2WAV["hidden_size"] % CODE2WAV["num_attention_heads"] == 0
    assert CODE2WAV["decoder_dim"] % 2 ** len(CODE2WAV["upsample_rates"]) == 0
    print("speech self-test passed")


def scale_weights(model, torch, seed):
    """make_tiny_qwen3_omni's redraw (clear margins, bf16 values) for every part, the talker's
    codec embedding and heads like the thinker's embedding and head."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                value = 0.1 * torch.randn(p.shape, generator=gen) if name.endswith("bias") else \
                    1.0 + 0.2 * torch.randn(p.shape, generator=gen)
                if "layer_scale" in name:
                    value = 0.5 + 0.3 * torch.randn(p.shape, generator=gen)
            elif any(k in name for k in ("embed_tokens", "lm_head", "codec_embedding", "codec_head",
                                         "code_embedding")):
                value = 0.5 * torch.randn(p.shape, generator=gen)
            elif name.endswith("mlp.gate.weight"):
                value = (3.0 / p.shape[-1] ** 0.5) * torch.randn(p.shape, generator=gen)
            else:
                fan_in = p[0].numel() if p.dim() != 3 or "experts" not in name else p.shape[-1]
                value = (1.0 / fan_in ** 0.5) * torch.randn(p.shape, generator=gen)
            p.copy_(value.to(torch.bfloat16).float())


def image_prompt(vocab, specials):
    """A system turn, then '<vision_start><image_pad> x 4<vision_end>Hi' from the user, as token ids."""
    s, e = specials["<|im_start|>"], specials["<|im_end|>"]
    rows = IMAGE_GRID[0] * IMAGE_GRID[1] * IMAGE_GRID[2] // 4
    image = [specials["<|vision_start|>"]] + [specials["<|image_pad|>"]] * rows + [specials["<|vision_end|>"]]
    return ([s] + list(b"system\nBe brief.") + [e, ord("\n"), s] + list(b"user\n") + image + list(b"Hi") +
            [e, ord("\n"), s, vocab["assistant"], ord("\n")])


def well_conditioned_code2wav(model, torch):
    """Replaces the code2wav weights by qwen3_omni_code2wav_reference.py's draw (bf16 values)."""
    import numpy as np
    weights = code2wav_fixture.make_weights(CODE2WAV, np.random.default_rng(SEED))
    state = {k[len("code2wav."):]: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.code2wav.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("code_offset" in m or "inv_freq" in m for m in missing), missing
    return weights


def allowed_margin(logits, eos):
    """The top-2 gap of a talker row over the ids generate may sample (the codebook and EOS)."""
    allowed = list(logits[:CODEBOOK]) + [logits[eos]]
    top = sorted(allowed, reverse=True)
    return float(top[0] - top[1])


def run_generate(model, torch, prompt, extra):
    """generate for one chat, capturing the talker's and predictor's calls, the talker stack's
    positions, the thinker's logits and the codes code2wav decoded."""
    captured = dict(talker=[], predictor=[], thinker=[], positions=None, codes=None)

    def talker_hook(_module, args, kwargs, output):
        embeds = kwargs.get("inputs_embeds")
        captured["talker"].append((None if embeds is None else embeds.detach().clone(), output.logits.detach().clone()))

    def stack_hook(_module, args, kwargs):
        if captured["positions"] is None and kwargs.get("position_ids") is not None:
            captured["positions"] = kwargs["position_ids"].detach().clone()

    def predictor_hook(_module, _args, _kwargs, output):
        captured["predictor"].append(output.logits.detach().clone())

    def thinker_hook(_module, _args, _kwargs, output):
        captured["thinker"].append(output.logits[0, -1].detach().clone())

    handles = [model.talker.register_forward_hook(talker_hook, with_kwargs=True),
               model.talker.model.register_forward_pre_hook(stack_hook, with_kwargs=True),
               model.talker.code_predictor.register_forward_hook(predictor_hook, with_kwargs=True),
               model.thinker.register_forward_hook(thinker_hook, with_kwargs=True)]
    decode = model.code2wav.chunked_decode

    def capture_codes(codes, *a, **k):
        captured["codes"] = codes.detach().clone()
        return decode(codes, *a, **k)

    model.code2wav.chunked_decode = capture_codes
    try:
        with torch.no_grad():
            result = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)),
                                    speaker="Ethan", return_audio=True, thinker_max_new_tokens=THINKER_NEW_TOKENS,
                                    thinker_do_sample=False, talker_max_new_tokens=TALKER_NEW_TOKENS,
                                    talker_do_sample=False, **extra)
    finally:
        for h in handles:
            h.remove()
        model.code2wav.chunked_decode = decode
    thinker_result, wav = result
    # generate returns the thinker's ids as a tensor (or an output with .sequences).
    captured["sequence"] = getattr(thinker_result, "sequences", thinker_result)[0].tolist()
    captured["wav"] = wav
    assert captured["codes"] is not None, "code2wav.chunked_decode was not called"
    return captured


def check_waveform(codes, wav, weights, log, np):
    """generate's waveform against the float64 code2wav reference of the same weights and codes."""
    want = code2wav_fixture.decode(codes, {k: v.astype(np.float64) for k, v in weights.items()}, CODE2WAV)
    got = wav.reshape(-1).float().numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    worst, peak = float(np.abs(got - want).max()), float(np.abs(want).max())
    clipped = float(np.mean(np.abs(want) >= 1.0))
    log.write(f"waveform vs the float64 reference: max abs {worst:.3g}, peak {peak:.3f}, clipped {clipped:.4f}\n")
    assert worst <= 1e-4 * peak, (worst, peak)


def image_case(model, torch, np, vocab, specials, code2wav_weights, out, log):
    """The image chat (module docstring): pixel seeds are tried until every greedy step of the
    thinker and of the talker (over the ids it may sample) clears MIN_MARGIN."""
    prompt = image_prompt(vocab, specials)
    grid = torch.tensor([list(IMAGE_GRID)])
    patches = IMAGE_GRID[0] * IMAGE_GRID[1] * IMAGE_GRID[2]
    eos = CODEC["codec_eos_token_id"]
    for seed in range(SEED, SEED + IMAGE_SEED_ATTEMPTS):
        gen = torch.Generator().manual_seed(seed)
        pixels = torch.randn((patches, IMAGE_PATCH_VALUES), generator=gen)
        captured = run_generate(model, torch, prompt, dict(pixel_values=pixels, image_grid_thw=grid))
        thinker_margin = min(float(torch.topk(t.float(), 2).values[0] - torch.topk(t.float(), 2).values[1])
                             for t in captured["thinker"])
        talker_margin = min(allowed_margin(logits[0, -1].float().tolist(), eos) for _, logits in captured["talker"])
        log.write(f"image seed {seed}: thinker margin {thinker_margin:.3e}, talker margin {talker_margin:.3e}\n")
        if thinker_margin > MIN_MARGIN and talker_margin > MIN_MARGIN:
            break
    else:
        raise RuntimeError("image case: no pixel seed gives clear margins")
    sequence = captured["sequence"]
    codes = captured["codes"][0].T.numpy().astype(np.int32)
    check_waveform(codes, captured["wav"], code2wav_weights, log, np)
    embeds, logits = captured["talker"][0]
    positions = captured["positions"]
    assert positions is not None, "the talker stack was called without position_ids"
    log.write(f"image: talker positions {tuple(positions.shape)}: {positions.reshape(positions.shape[0], -1).tolist()}\n")
    streams = positions.reshape(positions.shape[0], -1)[-3:].float().numpy()  # [3, L] (a text row first if 4)
    assert streams.shape[1] == embeds.shape[1], (streams.shape, embeds.shape)
    plain = bool(np.array_equal(streams[0], streams[1]) and np.array_equal(streams[0], streams[2]))
    log.write(f"image: the talker's positions are {'plain' if plain else '3-D'}\n")
    folder = os.path.join(out, "image")
    os.makedirs(folder)
    files = dict(pixel_values=pixels.numpy(), talker_prefill_embeds=embeds[0].float().numpy(),
                 talker_prefill_logits=logits[0].float().numpy(), talker_positions=streams, codes=codes,
                 waveform=captured["wav"].reshape(-1).float().numpy())
    for name, value in files.items():
        np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(value))
    return dict(prompt=prompt, grid=list(IMAGE_GRID), pixel_seed=seed, thinker_sequence=sequence,
                reply=sequence[len(prompt):], codes=codes.tolist(), talker_prefill_rows=int(embeds.shape[1]),
                talker_positions_plain=plain,
                thinker_margin=thinker_margin, talker_margin=talker_margin)


def build(out, torch, transformers, log):
    import numpy as np
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    vocab, _, _, specials = thinker_fixture.tokenizer_files()
    ids = thinker_fixture.token_ids(specials)
    thinker = dict(text_config=thinker_fixture.text_config(), audio_config=dict(thinker_fixture.AUDIO),
                   vision_config=dict(thinker_fixture.VISION), **ids["thinker"])
    thinker["text_config"]["mlp_only_layers"] = []
    config = Qwen3OmniMoeConfig(thinker_config=thinker, talker_config=talker_config(ids["thinker"]),
                                code2wav_config=dict(CODE2WAV), enable_audio_output=True, **ids["top"])
    torch.manual_seed(SEED)
    model = Qwen3OmniMoeForConditionalGeneration._from_config(config, attn_implementation="eager").float().eval()
    scale_weights(model, torch, SEED)
    log.write("talker modules: " + ", ".join(sorted({type(m).__name__ for m in model.talker.modules()})) + "\n")
    layer = model.talker.model.layers[0]
    log.write(f"talker layer 0 mlp: {type(layer.mlp).__name__}, attributes {sorted(vars(layer.mlp)['_modules'])}\n")
    assert hasattr(layer.mlp, "shared_expert") and hasattr(layer.mlp, "shared_expert_gate"), "no shared expert"

    code2wav_weights = well_conditioned_code2wav(model, torch)

    prompt = thinker_fixture.chat_prompt(vocab, specials)
    captured = run_generate(model, torch, prompt, {})
    sequence, wav = captured["sequence"], captured["wav"]
    log.write(f"thinker sequence {sequence}\n")
    codes = captured["codes"][0].T.numpy().astype(np.int32)  # [F, G]
    check_waveform(codes, wav, code2wav_weights, log, np)
    log.write(f"codes {codes.shape}: {codes.tolist()}\n")
    embeds, logits = captured["talker"][0]
    assert embeds is not None and embeds.dim() == 3, "the talker's first call had no inputs_embeds"
    log.write(f"talker calls {len(captured['talker'])}, prefill rows {embeds.shape[1]}; predictor calls "
              f"{len(captured['predictor'])}\n")
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, "talker_prefill_embeds.npy"), embeds[0].float().numpy())
    np.save(os.path.join(out, "talker_prefill_logits.npy"), logits[0].float().numpy())
    # The predictor's calls for frame 0: its logits of each group 1..G-1 (the last row of each call).
    first = [c[0, -1].float().numpy() for c in captured["predictor"][:GROUPS - 1]]
    np.save(os.path.join(out, "predictor_logits.npy"), np.stack(first))
    np.save(os.path.join(out, "codes.npy"), codes)
    np.save(os.path.join(out, "waveform.npy"), wav.reshape(-1).float().numpy())
    image = image_case(model, torch, np, vocab, specials, code2wav_weights, out, log)
    top2 = torch.topk(logits[0, -1].float(), 2).values
    reference = dict(prompt=prompt, thinker_sequence=sequence, reply=sequence[len(prompt):], codes=codes.tolist(),
                     talker_prefill_rows=int(embeds.shape[1]), waveform_samples=int(wav.numel()),
                     talker_last_prefill_margin=float(top2[0] - top2[1]), speaker="ethan",
                     talker=TALKER, predictor=PREDICTOR, code2wav=CODE2WAV, codec=CODEC, speakers=SPEAKERS,
                     image=image, transformers_version=transformers.__version__, torch_version=torch.__version__)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    folder = os.path.join(out, "per_expert")
    model.to(torch.bfloat16).save_pretrained(folder)
    thinker_fixture.write_tokenizer(folder)
    keys = thinker_fixture.keys_of(folder)
    log.write("talker/code2wav keys: " + json.dumps({k: v for k, v in keys.items() if k.startswith(
        ("talker.model.layers.0.", "talker.code_predictor.model.layers.0.", "talker.text_projection",
         "talker.hidden_projection", "talker.codec_head", "talker.model.codec_embedding", "code2wav.code_embedding",
         "talker.code_predictor.lm_head.0", "talker.code_predictor.model.codec_embedding.0"))}) + "\n")
    total = sum(os.path.getsize(os.path.join(d, fn)) for d, _, fns in os.walk(out) for fn in fns)
    log.write(f"total size {total} bytes\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    self_test()
    if args.self_test:
        return 0
    if not args.out:
        ap.error("--out is required")
    import torch
    import transformers

    torch.set_num_threads(8)
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    log_path = os.path.join(os.path.dirname(os.path.abspath(args.out)), "qwen3_omni_speech_reference.log")
    thinker_fixture.run_logged(log_path, lambda log: build(args.out, torch, transformers, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
