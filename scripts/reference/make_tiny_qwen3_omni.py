#!/usr/bin/env python3
"""Builds a tiny random-weight Qwen3-Omni thinker checkpoint and its Hugging Face reference outputs.

Run on the GPU machine (torch 2.11, transformers 5.17; the computation itself is float32 on the
CPU, attn_implementation="eager"). The output goes to tests/data/tiny_qwen3_omni/:

    per_expert/   save_pretrained's default layout: thinker.model.layers.{l}.mlp.experts.{e}.
                  {gate,up,down}_proj.weight (as the released checkpoints store the experts)
    fused/        save_pretrained(save_original_format=False): the transformers-5 fused
                  experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I]
    reference.json  the prompts (token ids), greedy continuations, margins, the config summary
    logits_<i>.npy  float32 logits of prompt i at every position, [len, vocab]

Both checkpoints hold the same weights (bfloat16 on disk; the reference is computed over those
bf16 values widened to float32) and the tiny byte-level tokenizer (vocab.json, merges.txt,
tokenizer_config.json). The model is Qwen3OmniMoeForConditionalGeneration with
enable_audio_output=false (the Thinking/Captioner layout: the thinker alone, its talker_config and
code2wav_config at their class defaults), so the reference is the thinker's text path.

    python3 scripts/reference/make_tiny_qwen3_omni.py --out DIR/tiny_qwen3_omni
    python3 scripts/reference/make_tiny_qwen3_omni.py --self-test   # torch-free checks, any python3
"""
import argparse
import json
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_qwen3_tts import ASSISTANT_MERGES, bytes_to_unicode  # noqa: E402

SEED = 20261202

# The thinker's text model: GQA 2, head_dim 32 != hidden / heads = 16, 8 experts top-2 with
# renormalised weights, three layers of which the middle one is a dense MLP (mlp_only_layers), an
# interleaved M-RoPE section summing to head_dim / 2.
TEXT = dict(vocab=320, hidden=64, layers=3, heads=4, kv_heads=2, head_dim=32, inter=96, moe_inter=32, experts=8,
            top_k=2, norm_topk_prob=True, mlp_only_layers=[1], mrope_section=[6, 5, 5], theta=1e6, eps=1e-6)
# Small encoders with the released geometry where it is cheap (128 mel bins, 100-frame chunks,
# 16-pixel patches, 2x2 merge, DeepStack); qwen3_omni_audio_reference.py references the audio tower.
AUDIO = dict(num_mel_bins=128, d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64,
             downsample_hidden_size=8, output_dim=TEXT["hidden"], n_window=50, n_window_infer=800,
             conv_chunksize=500, max_source_positions=1500)
VISION = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=TEXT["hidden"],
              patch_size=16, temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
              num_position_embeddings=64, deepstack_visual_indexes=[0, 1], hidden_act="gelu_pytorch_tanh")

# Tokenizer: the 256 byte symbols, the merges that make "assistant" one token, then Qwen3-Omni's
# added tokens in their released order (ids shifted down to fit the tiny vocabulary).
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
            "<|audio_pad|>"]

PROMPT_LENGTHS = [1, 9, 37]  # 37 crosses two KV blocks of 16
NEW_TOKENS = 16
# The reference must be robust to float32 rounding (two implementations differ by ~1e-6 relative):
# every greedy step's top-1/top-2 logit margin and every routing decision's gap between the k-th and
# (k+1)-th expert probability must clear these floors, so weight seeds are tried in order until one does (the script fails if none of
# SEED_ATTEMPTS does).
MIN_LOGIT_MARGIN = 2e-3
MIN_ROUTING_GAP = 2e-5
SEED_ATTEMPTS = 200


def tokenizer_files():
    enc = bytes_to_unicode()
    vocab = {enc[b]: b for b in range(256)}
    for a, b in ASSISTANT_MERGES:
        vocab[a + b] = len(vocab)
    specials = {s: len(vocab) + i for i, s in enumerate(SPECIALS)}
    merges = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in ASSISTANT_MERGES)
    added = {str(i): dict(content=s, lstrip=False, normalized=False, rstrip=False, single_word=False, special=True)
             for s, i in specials.items()}
    config = dict(add_bos_token=False, add_prefix_space=False, added_tokens_decoder=added, bos_token=None,
                  eos_token="<|im_end|>", pad_token="<|endoftext|>", errors="replace", model_max_length=32768,
                  split_special_tokens=False, tokenizer_class="Qwen2Tokenizer", unk_token=None)
    return vocab, merges, config, specials


def chat_prompt(vocab, specials):
    """'<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n' as token ids (ASCII bytes + specials)."""
    s, e = specials["<|im_start|>"], specials["<|im_end|>"]
    return [s] + list(b"user\nHi") + [e, ord("\n"), s, vocab["assistant"], ord("\n")]


def prompts(vocab, specials):
    rng = random.Random(SEED)
    out = [[rng.randrange(TEXT["vocab"]) for _ in range(n)] for n in PROMPT_LENGTHS]
    return out + [chat_prompt(vocab, specials)]


def token_ids(specials):
    """The id fields of the three config levels, pointing at the tiny tokenizer's added tokens."""
    return dict(
        thinker=dict(audio_token_id=specials["<|audio_pad|>"], image_token_id=specials["<|image_pad|>"],
                     video_token_id=specials["<|video_pad|>"], vision_start_token_id=specials["<|vision_start|>"],
                     audio_start_token_id=specials["<|audio_start|>"], position_id_per_seconds=13),
        top=dict(im_start_token_id=specials["<|im_start|>"], im_end_token_id=specials["<|im_end|>"],
                 tts_pad_token_id=specials["<tts_pad>"], tts_bos_token_id=specials["<tts_text_bos>"],
                 tts_eos_token_id=specials["<tts_text_eod>"], system_token_id=ord("s"), user_token_id=ord("u"),
                 assistant_token_id=256 + len(ASSISTANT_MERGES) - 1))


def text_config():
    t = TEXT
    return dict(vocab_size=t["vocab"], hidden_size=t["hidden"], intermediate_size=t["inter"],
                num_hidden_layers=t["layers"], num_attention_heads=t["heads"], num_key_value_heads=t["kv_heads"],
                head_dim=t["head_dim"], hidden_act="silu", max_position_embeddings=256, rms_norm_eps=t["eps"],
                tie_word_embeddings=False, attention_bias=False, decoder_sparse_step=1,
                moe_intermediate_size=t["moe_inter"], num_experts=t["experts"], num_experts_per_tok=t["top_k"],
                norm_topk_prob=t["norm_topk_prob"], mlp_only_layers=list(t["mlp_only_layers"]),
                rope_parameters=dict(rope_type="default", rope_theta=t["theta"], mrope_section=t["mrope_section"],
                                     interleaved=True, mrope_interleaved=True))


def self_test():
    vocab, _, config, specials = tokenizer_files()
    assert vocab["assistant"] == 263 and specials["<|endoftext|>"] == 264, (vocab["assistant"], specials)
    assert max(specials.values()) < TEXT["vocab"], specials
    assert token_ids(specials)["top"]["assistant_token_id"] == vocab["assistant"]
    assert set(config["added_tokens_decoder"]) == {str(i) for i in specials.values()}
    assert sum(TEXT["mrope_section"]) == TEXT["head_dim"] // 2
    assert TEXT["heads"] * TEXT["head_dim"] != TEXT["hidden"] and TEXT["heads"] // TEXT["kv_heads"] > 1
    assert 1 < TEXT["top_k"] < TEXT["experts"]
    assert all(i < TEXT["layers"] for i in TEXT["mlp_only_layers"])
    assert all(i < VISION["depth"] for i in VISION["deepstack_visual_indexes"])
    assert int(VISION["num_position_embeddings"] ** 0.5) ** 2 == VISION["num_position_embeddings"]
    ps = prompts(vocab, specials)
    assert [len(p) for p in ps[:3]] == PROMPT_LENGTHS and all(0 <= i < TEXT["vocab"] for p in ps for i in p)
    assert ps[3][:2] == [specials["<|im_start|>"], ord("u")] and ps[3][-2:] == [vocab["assistant"], 10], ps[3]
    assert prompts(vocab, specials) == ps, "prompts must be deterministic"
    print("self-test passed")


def scale_weights(model, torch, seed):
    """Re-draws every parameter so that logits and routing have clear margins (the default init,
    std 0.02, makes both nearly uniform), then rounds it to bfloat16 (what the files hold)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                if name.endswith("bias"):
                    value = 0.1 * torch.randn(p.shape, generator=gen)
                else:  # RMSNorm / LayerNorm scales
                    value = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name or "lm_head" in name:
                value = 0.5 * torch.randn(p.shape, generator=gen)
            elif name.endswith("mlp.gate.weight"):  # the router: decisive top-k choices
                value = (3.0 / p.shape[-1] ** 0.5) * torch.randn(p.shape, generator=gen)
            else:  # linear and conv weights, the fused experts [E, out, in] included
                fan_in = p[0].numel() if p.dim() != 3 or "experts" not in name else p.shape[-1]
                value = (1.0 / fan_in ** 0.5) * torch.randn(p.shape, generator=gen)
            p.copy_(value.to(torch.bfloat16).float())


def routing_margins(model, torch):
    """Forward hooks on the routers: the smallest gap between the k-th and (k+1)-th routing
    probability seen, so a reader knows the top-k choice is robust to float32 rounding."""
    seen = []

    def hook(module, args, _output):
        x = args[0].reshape(-1, args[0].shape[-1]).float()
        probs = torch.softmax(x @ module.weight.float().t(), dim=-1)
        top = torch.topk(probs, TEXT["top_k"] + 1, dim=-1).values
        seen.append(float((top[:, -2] - top[:, -1]).min()))

    handles = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.gate")]
    return seen, handles


def keys_of(folder):
    from safetensors import safe_open

    keys = {}
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(folder, fn), "pt") as st:
                for k in st.keys():
                    keys[k] = list(st.get_slice(k).get_shape())
    return keys


def preprocessor_config():
    """The released preprocessor_config.json's fields: WhisperFeatureExtractor (16 kHz, 128 mel bins,
    n_fft 400, hop 160, features of up to 300 s) and the Qwen2-VL image processor (16-pixel patches,
    temporal patch 2, 2 x 2 merge)."""
    return dict(processor_class="Qwen3OmniMoeProcessor", feature_extractor_type="WhisperFeatureExtractor",
                feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=300,
                n_samples=4800000, nb_max_frames=30000, padding_side="right", padding_value=0.0,
                return_attention_mask=True, dither=0.0, image_processor_type="Qwen2VLImageProcessor",
                do_resize=True, do_rescale=True, rescale_factor=1.0 / 255.0, do_normalize=True,
                image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_convert_rgb=True, min_pixels=3136,
                max_pixels=12845056, patch_size=16, temporal_patch_size=2, merge_size=2)


def write_tokenizer(folder):
    vocab, merges, config, _ = tokenizer_files()
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write(merges)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor_config(), f, indent=2)


def thinker_logits(model, torch, ids):
    tokens = torch.tensor([ids])
    return model.thinker(input_ids=tokens, attention_mask=torch.ones_like(tokens)).logits[0].float()


def build(out, torch, transformers, log):
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    vocab, _, _, specials = tokenizer_files()
    ids = token_ids(specials)
    mlp_only = list(TEXT["mlp_only_layers"])
    thinker = dict(text_config=text_config(), audio_config=dict(AUDIO), vision_config=dict(VISION), **ids["thinker"])
    config = Qwen3OmniMoeConfig(thinker_config=thinker, enable_audio_output=False, **ids["top"])
    torch.manual_seed(SEED)
    model = Qwen3OmniMoeForConditionalGeneration._from_config(config, attn_implementation="eager")
    model = model.float().eval()
    layers = model.thinker.model.layers
    kinds = [type(layer.mlp).__name__ for layer in layers]
    log.write(f"mlp kinds: {kinds}\n")
    if "Sparse" in kinds[mlp_only[0]]:
        # This transformers version ignores mlp_only_layers: every layer is MoE then.
        log.write("mlp_only_layers is ignored by this transformers version; rebuilding with []\n")
        thinker["text_config"]["mlp_only_layers"] = []
        config = Qwen3OmniMoeConfig(thinker_config=thinker, enable_audio_output=False, **ids["top"])
        torch.manual_seed(SEED)
        model = Qwen3OmniMoeForConditionalGeneration._from_config(config, attn_implementation="eager").float().eval()
        layers = model.thinker.model.layers
        kinds = [type(layer.mlp).__name__ for layer in layers]
        mlp_only = []
    attn = layers[0].self_attn
    assert attn.q_proj.weight.shape[0] == TEXT["heads"] * TEXT["head_dim"], attn.q_proj.weight.shape
    assert attn.k_proj.weight.shape[0] == TEXT["kv_heads"] * TEXT["head_dim"], attn.k_proj.weight.shape
    all_prompts = prompts(vocab, specials)
    os.makedirs(out, exist_ok=True)
    import numpy as np

    for attempt in range(SEED_ATTEMPTS):
        seed = SEED + attempt
        scale_weights(model, torch, seed)
        margins, handles = routing_margins(model, torch)
        logit_margins, continuations, prompt_logits = [], [], []
        with torch.no_grad():
            for prompt in all_prompts:
                logits = thinker_logits(model, torch, prompt).numpy()
                assert logits.shape == (len(prompt), TEXT["vocab"]), logits.shape
                prompt_logits.append(logits.astype(np.float32))
                seq, generated, step_margins = list(prompt), [], []
                for _ in range(NEW_TOKENS):
                    last = thinker_logits(model, torch, seq)[-1]
                    top = torch.topk(last, 2)
                    step_margins.append(float(top.values[0] - top.values[1]))
                    generated.append(int(top.indices[0]))
                    seq.append(generated[-1])
                continuations.append(generated)
                logit_margins.append(min(step_margins))
        for h in handles:
            h.remove()
        min_routing_margin = min(margins)
        log.write(f"seed {seed}: min top-2 logit margins {logit_margins}; min routing gap (k-th vs k+1-th prob) "
                  f"{min_routing_margin:.3e}\n")
        if min(logit_margins) > MIN_LOGIT_MARGIN and min_routing_margin > MIN_ROUTING_GAP:
            break
    else:
        raise SystemExit(f"no weight seed in [{SEED}, {SEED + SEED_ATTEMPTS}) gives logit margins > "
                         f"{MIN_LOGIT_MARGIN} and routing gaps > {MIN_ROUTING_GAP}")
    for i, logits in enumerate(prompt_logits):
        np.save(os.path.join(out, f"logits_{i}.npy"), logits)
    params = dict(model.named_parameters())
    log.write("in-memory parameters:\n" + "".join(f"  {n} {list(p.shape)}\n" for n, p in params.items()
                                                if ".layers.0." in n or "layers" not in n) + "\n")

    model = model.to(torch.bfloat16)
    per_expert, fused = os.path.join(out, "per_expert"), os.path.join(out, "fused")
    model.save_pretrained(per_expert)
    model.save_pretrained(fused, save_original_format=False)
    k_orig, k_fused = keys_of(per_expert), keys_of(fused)
    moe_layer = next(i for i in range(TEXT["layers"]) if i not in mlp_only)
    p = f"thinker.model.layers.{moe_layer}.mlp."
    E, I, H = TEXT["experts"], TEXT["moe_inter"], TEXT["hidden"]
    assert k_orig.get(p + "experts.0.gate_proj.weight") == [I, H], sorted(k for k in k_orig if k.startswith(p))
    assert k_orig.get(p + "experts.0.down_proj.weight") == [H, I]
    assert k_orig.get(p + "gate.weight") == [E, H]
    assert k_fused.get(p + "experts.gate_up_proj") == [E, 2 * I, H], sorted(k for k in k_fused if k.startswith(p))
    assert k_fused.get(p + "experts.down_proj") == [E, H, I]
    assert k_fused.get(p + "gate.weight") == [E, H]
    assert "thinker.lm_head.weight" in k_orig and "thinker.model.embed_tokens.weight" in k_orig
    assert not any(k.startswith(("talker.", "code2wav.")) for k in k_orig), "no talker weights expected"
    for m in mlp_only:
        assert k_orig.get(f"thinker.model.layers.{m}.mlp.gate_proj.weight") == [TEXT["inter"], H]
    log.write("per_expert keys of one MoE layer: " + json.dumps({k: v for k, v in k_orig.items() if
                                                                  k.startswith(p) and ".experts.1" not in k}) + "\n")
    log.write("fused keys of one MoE layer: " + json.dumps({k: v for k, v in k_fused.items() if k.startswith(p)}) + "\n")

    # Both layouts must load back (through transformers) to the reference logits.
    for folder in (per_expert, fused):
        write_tokenizer(folder)
        again = Qwen3OmniMoeForConditionalGeneration.from_pretrained(folder, attn_implementation="eager",
                                                                     dtype=torch.float32).eval()
        with torch.no_grad():
            for i, prompt in enumerate(all_prompts):
                got = thinker_logits(again, torch, prompt).numpy()
                ref = np.load(os.path.join(out, f"logits_{i}.npy"))
                err = float(np.abs(got - ref).max() / np.abs(ref).max())
                assert err < 1e-5, (folder, i, "reload differs", err)
        with open(os.path.join(folder, "config.json")) as f:
            saved = json.load(f)
        log.write(f"{os.path.basename(folder)}/config.json thinker_config.text_config: "
                  f"{json.dumps(saved['thinker_config']['text_config'], sort_keys=True)}\n")
        log.write(f"{os.path.basename(folder)} files: {sorted(os.listdir(folder))}\n")

    reference = dict(prompts=all_prompts, logits=[f"logits_{i}.npy" for i in range(len(all_prompts))],
                     greedy_continuations=continuations, min_top2_margin=logit_margins, weight_seed=seed,
                     min_routing_gap=min_routing_margin, mlp_kinds=kinds, text=dict(TEXT, mlp_only_layers=mlp_only),
                     token_ids=ids, transformers_version=transformers.__version__, torch_version=torch.__version__)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    total = sum(os.path.getsize(os.path.join(d, fn)) for d, _, fns in os.walk(out) for fn in fns)
    log.write(f"total size {total} bytes\n")


def run_logged(log_path, work):
    """Runs work(log) with a log file open at log_path, its traceback logged on failure, and the
    log printed either way (the GPU machine's run tool returns stdout)."""
    try:
        with open(log_path, "w") as log:
            try:
                work(log)
            except Exception:
                import traceback

                log.write(traceback.format_exc())
                raise
    finally:
        print(open(log_path).read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="output folder (created; becomes tests/data/tiny_qwen3_omni)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    self_test()
    if args.self_test:
        return 0
    import torch
    import transformers

    torch.set_num_threads(8)
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    log_path = os.path.join(os.path.dirname(os.path.abspath(args.out)), "make_tiny_qwen3_omni.log")
    run_logged(log_path, lambda log: build(args.out, torch, transformers, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
