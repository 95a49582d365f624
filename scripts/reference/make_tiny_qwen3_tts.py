#!/usr/bin/env python3
"""Builds a tiny random-weight Qwen3-TTS talker checkpoint and its reference outputs.

Qwen3-TTS is not in transformers (and the official package does not run under transformers 5), so
this is a clean-room reference written from docs/models/qwen3_tts.md: the talker and code-predictor stacks are
transformers' Qwen3Model (fed inputs_embeds; with equal M-RoPE streams the talker's rotation is
plain RoPE), everything around them (text projection, codec embeddings, heads, the prompt
layouts of its "Prompt" and the greedy generation loop of its "Generation") is written here in numpy/torch.

Output (tests/data/tiny_qwen3_tts/): the checkpoint in the real layout (config.json,
generation_config.json, model.safetensors, vocab.json, merges.txt, tokenizer_config.json; a
tiny byte-level BPE vocabulary whose ids are small, with the special ids in config.json), and
reference.json + *.npy:
  - talker stack: inputs_embeds [T, H] -> post-norm hidden [T, H] and codec logits [T, V]
  - code predictor, teacher-forced over given codes: logits of codebooks 1..15 [15, 64]
  - prompts of every layout (CustomVoice, dialect speaker + instructions, VoiceDesign, Base)
  - greedy generation (talker and sub-talker greedy, repetition penalty, min_new_tokens,
    suppression) for two CustomVoice requests: the codes of every frame.

    python3 make_tiny_qwen3_tts.py --out DIR   # GPU machine: writes DIR/tiny_qwen3_tts.tar.gz
    python3 make_tiny_qwen3_tts.py --self-test  # any python3 + numpy: the torch-free logic
"""
import argparse
import json
import os
import re
import sys
import tarfile
import tempfile

import numpy as np

SEED = 20261129

# --- dimensions (structurally faithful: GQA 2, nh*hd != H, cp narrower than the talker (1.7B
# layout with small_to_mtp_projection), 16 code groups, suppression range = [V-1024, V)) ---
CODEBOOK = 64
CODEC_VOCAB = CODEBOOK + 1024
TALKER = dict(hidden=32, layers=2, heads=4, kv_heads=2, head_dim=16, inter=48, theta=1e6, eps=1e-6)
PREDICTOR = dict(hidden=24, layers=2, heads=4, kv_heads=2, head_dim=8, inter=40, theta=1e6, eps=1e-6)
NUM_CODE_GROUPS = 16
TEXT_HIDDEN = 20
# Real codec ids minus 1984 (= 2048 - CODEBOOK): the same offsets inside the top 1024 ids.
OFF = 2048 - CODEBOOK
CODEC_IDS = dict(codec_pad_id=2148 - OFF, codec_bos_id=2149 - OFF, codec_eos_token_id=2150 - OFF,
                 codec_think_id=2154 - OFF, codec_nothink_id=2155 - OFF, codec_think_bos_id=2156 - OFF,
                 codec_think_eos_id=2157 - OFF)
LANGUAGES = {"english": 2050 - OFF, "chinese": 2055 - OFF, "german": 2053 - OFF,
             "sichuan_dialect": 2062 - OFF, "beijing_dialect": 2074 - OFF}
SPEAKERS = {"aiden": 2861 - OFF, "eric": 2875 - OFF, "dylan": 2878 - OFF, "vivian": 3065 - OFF}
DIALECTS = {"aiden": False, "eric": "sichuan_dialect", "dylan": "beijing_dialect", "vivian": False}

# --- tiny tokenizer: the 256 byte symbols (id = byte value), merges that make "assistant" one
# token (as in Qwen's vocabulary), then the added tokens ---
ASSISTANT_MERGES = [("a", "s"), ("as", "s"), ("ass", "i"), ("assi", "s"), ("assis", "t"), ("assist", "a"),
                    ("assista", "n"), ("assistan", "t")]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>"]
TEXT_VOCAB = 272  # > the tokenizer's ids, like Qwen's padded embedding table
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")

MAX_FRAMES = 8
REPETITION_PENALTY = 1.05
MIN_NEW_TOKENS = 2

REQUESTS = [
    dict(name="custom_voice_english", task="custom_voice", text="Hello, world. This is a test.", voice="Aiden",
         language="English", instructions=""),
    dict(name="dialect_auto_instructed", task="custom_voice", text="Good morning, assistant!", voice="ERIC",
         language="Auto", instructions="Speak slowly."),
]
PROMPT_ONLY = [
    dict(name="voice_design", task="voice_design", text="Nice day.", voice="", language="german",
         instructions="A calm, deep voice."),
    dict(name="base_xvector", task="base", text="Nice day.", voice="", language="Auto", instructions=""),
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


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


def ascii_tokenize(text, vocab, specials):
    """Byte-level BPE for ASCII text (\\p{L} = letters, \\p{N} = digits), to cross-check `tokenizers`."""
    pat = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*|"
                     r"\s*[\r\n]+|\s+(?!\S)|\s+")
    ranks = {a + " " + b: i for i, (a, b) in enumerate(ASSISTANT_MERGES)}
    enc = bytes_to_unicode()
    ids = []
    parts = re.split("(" + "|".join(re.escape(s) for s in specials) + ")", text)
    for part in parts:
        if part in specials:
            ids.append(specials[part])
            continue
        for word in pat.findall(part):
            syms = [enc[b] for b in word.encode()]
            while True:
                pairs = [(ranks.get(syms[i] + " " + syms[i + 1], 1 << 30), i) for i in range(len(syms) - 1)]
                if not pairs or min(pairs)[0] == 1 << 30:
                    break
                _, i = min(pairs)
                syms = syms[:i] + [syms[i] + syms[i + 1]] + syms[i + 2:]
            ids += [vocab[s] for s in syms]
    return ids


def config_json(specials, vocab):
    def stack(d, vocab_size, extra):
        c = dict(hidden_size=d["hidden"], intermediate_size=d["inter"], num_hidden_layers=d["layers"],
                 num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"], head_dim=d["head_dim"],
                 vocab_size=vocab_size, rope_theta=d["theta"], rms_norm_eps=d["eps"], hidden_act="silu",
                 attention_bias=False, use_sliding_window=False, sliding_window=None)
        c.update(extra)
        return c

    predictor = stack(PREDICTOR, CODEBOOK, dict(model_type="qwen3_tts_talker_code_predictor", rope_scaling=None,
                                                 max_position_embeddings=65536, num_code_groups=NUM_CODE_GROUPS,
                                                 layer_types=["full_attention"] * PREDICTOR["layers"]))
    talker = stack(TALKER, CODEC_VOCAB, dict(
        model_type="qwen3_tts_talker", max_position_embeddings=32768, num_code_groups=NUM_CODE_GROUPS,
        rope_scaling=dict(interleaved=True, mrope_section=[4, 2, 2], rope_type="default"),
        text_vocab_size=TEXT_VOCAB, text_hidden_size=TEXT_HIDDEN, position_id_per_seconds=13,
        code_predictor_config=predictor, codec_language_id=LANGUAGES, spk_id=SPEAKERS, spk_is_dialect=DIALECTS,
        **CODEC_IDS))
    return dict(architectures=["Qwen3TTSForConditionalGeneration"], model_type="qwen3_tts",
                tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="1b7", tts_model_type="custom_voice",
                im_start_token_id=specials["<|im_start|>"], im_end_token_id=specials["<|im_end|>"],
                assistant_token_id=vocab["assistant"], tts_pad_token_id=specials["<tts_pad>"],
                tts_bos_token_id=specials["<tts_text_bos>"], tts_eos_token_id=specials["<tts_text_eod>"],
                talker_config=talker, torch_dtype="float32")


GENERATION_CONFIG = dict(do_sample=True, repetition_penalty=1.05, temperature=0.9, top_p=1.0, top_k=50,
                         subtalker_dosample=True, subtalker_temperature=0.9, subtalker_top_p=1.0,
                         subtalker_top_k=50, max_new_tokens=8192)


def stack_weights(rng, d, prefix):
    w = {}
    h, hd = d["hidden"], d["head_dim"]
    q, kv = d["heads"] * hd, d["kv_heads"] * hd

    def lin(n_out, n_in):
        return rng.normal(0.0, 1.0 / np.sqrt(n_in), size=(n_out, n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.normal(size=n)).astype(np.float32)

    for i in range(d["layers"]):
        p = f"{prefix}layers.{i}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_proj.weight"] = lin(q, h)
        w[p + "self_attn.k_proj.weight"] = lin(kv, h)
        w[p + "self_attn.v_proj.weight"] = lin(kv, h)
        w[p + "self_attn.o_proj.weight"] = lin(h, q)
        w[p + "self_attn.q_norm.weight"] = norm(hd)
        w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "mlp.gate_proj.weight"] = lin(d["inter"], h)
        w[p + "mlp.up_proj.weight"] = lin(d["inter"], h)
        w[p + "mlp.down_proj.weight"] = lin(h, d["inter"])
    w[prefix + "norm.weight"] = norm(h)
    return w


def make_weights():
    rng = np.random.default_rng(SEED)
    w = {}
    w.update(stack_weights(rng, TALKER, "talker.model."))
    w.update(stack_weights(rng, PREDICTOR, "talker.code_predictor.model."))
    h, hc = TALKER["hidden"], PREDICTOR["hidden"]

    def normal(shape, std):
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    w["talker.model.codec_embedding.weight"] = normal((CODEC_VOCAB, h), 0.5)
    # Larger than init scale so that logits have clear maxima (greedy codes are then robust to
    # float rounding differences between implementations).
    w["talker.codec_head.weight"] = normal((CODEC_VOCAB, h), 3.0 / np.sqrt(h))
    w["talker.model.text_embedding.weight"] = normal((TEXT_VOCAB, TEXT_HIDDEN), 0.5)
    w["talker.text_projection.linear_fc1.weight"] = normal((TEXT_HIDDEN, TEXT_HIDDEN), 1.0 / np.sqrt(TEXT_HIDDEN))
    w["talker.text_projection.linear_fc1.bias"] = normal((TEXT_HIDDEN,), 0.1)
    w["talker.text_projection.linear_fc2.weight"] = normal((h, TEXT_HIDDEN), 1.0 / np.sqrt(TEXT_HIDDEN))
    w["talker.text_projection.linear_fc2.bias"] = normal((h,), 0.1)
    w["talker.code_predictor.small_to_mtp_projection.weight"] = normal((hc, h), 1.0 / np.sqrt(h))
    w["talker.code_predictor.small_to_mtp_projection.bias"] = normal((hc,), 0.1)
    for g in range(NUM_CODE_GROUPS - 1):
        w[f"talker.code_predictor.model.codec_embedding.{g}.weight"] = normal((CODEBOOK, h), 0.5)
        w[f"talker.code_predictor.lm_head.{g}.weight"] = normal((CODEBOOK, hc), 3.0 / np.sqrt(hc))
    return w


def silu(x):
    return x / (1.0 + np.exp(-x))


class Heads:
    """Everything around the two stacks, in float64 numpy over the float32 weights."""

    def __init__(self, w, cfg):
        self.w = {k: v.astype(np.float64) for k, v in w.items()}
        self.cfg = cfg
        self.t = cfg["talker_config"]

    def project_text(self, ids):
        w = self.w
        x = w["talker.model.text_embedding.weight"][ids]
        x = silu(x @ w["talker.text_projection.linear_fc1.weight"].T + w["talker.text_projection.linear_fc1.bias"])
        return x @ w["talker.text_projection.linear_fc2.weight"].T + w["talker.text_projection.linear_fc2.bias"]

    def codec(self, i):
        return self.w["talker.model.codec_embedding.weight"][i]

    def cp_embed(self, g, code):  # embedding table of codebook g (1..15)
        return self.w[f"talker.code_predictor.model.codec_embedding.{g - 1}.weight"][code]

    def mtp(self, rows):
        w = self.w
        return rows @ w["talker.code_predictor.small_to_mtp_projection.weight"].T + \
            w["talker.code_predictor.small_to_mtp_projection.bias"]

    def frame_sum(self, codes):
        return self.codec(codes[0]) + sum(self.cp_embed(g, codes[g]) for g in range(1, NUM_CODE_GROUPS))


def build_prompt(req, heads, tokenize, xvector):
    """The prompt (docs/models/qwen3_tts.md, "Prompt"), non-streaming text layout. Returns (rows [n, H], text ids, codec prefix with -1 = x-vector)."""
    cfg, t = heads.cfg, heads.t
    ids = tokenize(f"<|im_start|>assistant\n{req['text']}<|im_end|>\n<|im_start|>assistant\n")
    role, text = ids[:3], ids[3:-5]
    assert role[0] == cfg["im_start_token_id"] and role[1] == cfg["assistant_token_id"], role
    instruct = tokenize(f"<|im_start|>user\n{req['instructions']}<|im_end|>\n") if req["instructions"] else []
    lang = req["language"].lower()
    speaker = req["voice"].lower()
    lang_id = None if lang == "auto" else t["codec_language_id"][lang]
    dialect = t["spk_is_dialect"].get(speaker, False) if req["task"] == "custom_voice" else False
    if dialect and lang in ("chinese", "auto"):
        lang_id = t["codec_language_id"][dialect]
    if lang_id is None:
        q = [t["codec_nothink_id"], t["codec_think_bos_id"], t["codec_think_eos_id"]]
    else:
        q = [t["codec_think_id"], t["codec_think_bos_id"], lang_id, t["codec_think_eos_id"]]
    if req["task"] == "custom_voice":
        q.append(t["spk_id"][speaker])
    elif req["task"] == "base":
        q.append(-1)
    q += [t["codec_pad_id"], t["codec_bos_id"]]
    tts_pad, tts_bos, tts_eos = heads.project_text([cfg["tts_pad_token_id"], cfg["tts_bos_token_id"],
                                                    cfg["tts_eos_token_id"]])
    rows = []
    if instruct:
        rows += list(heads.project_text(instruct))
    rows += list(heads.project_text(role))
    n = len(q)
    for j in range(n - 1):
        text_track = tts_pad if j < n - 2 else tts_bos
        codec_track = xvector if q[j] == -1 else heads.codec(q[j])
        rows.append(text_track + codec_track)
    for row in heads.project_text(text):
        rows.append(row + heads.codec(t["codec_pad_id"]))
    rows.append(tts_eos + heads.codec(t["codec_pad_id"]))
    rows.append(tts_pad + heads.codec(t["codec_bos_id"]))
    return np.stack(rows), text, q, tts_pad


def talker_logits_processors(logits, generated, t):
    """The talker's logits processors in Hugging Face's order: repetition penalty, min_new_tokens, suppression."""
    logits = logits.copy()
    for tok in set(generated):
        logits[tok] = logits[tok] * REPETITION_PENALTY if logits[tok] < 0 else logits[tok] / REPETITION_PENALTY
    eos = t["codec_eos_token_id"]
    if len(generated) < MIN_NEW_TOKENS:
        logits[eos] = -np.inf
    keep = logits[eos]
    logits[CODEC_VOCAB - 1024:] = -np.inf
    logits[eos] = keep
    return logits


def generate(prompt_rows, tts_pad, heads, talker_stack, predictor_stack, codec_head, cp_heads):
    """Greedy generation (docs/models/qwen3_tts.md, "Generation"): talker and sub-talker argmax. Returns (frames, margins)."""
    t = heads.t
    seq = list(prompt_rows)
    frames, generated, margins = [], [], []
    while len(frames) < MAX_FRAMES:
        hidden = talker_stack(np.stack(seq))[-1]
        logits = talker_logits_processors(hidden @ codec_head.T, generated, t)
        order = np.argsort(-logits, kind="stable")
        margins.append(float(logits[order[0]] - logits[order[1]]))
        code0 = int(order[0])
        generated.append(code0)
        if code0 == t["codec_eos_token_id"]:
            break
        codes = [code0]
        cp_seq = [hidden, heads.codec(code0)]
        for g in range(1, NUM_CODE_GROUPS):
            h = predictor_stack(heads.mtp(np.stack(cp_seq)))[-1]
            lg = h @ cp_heads[g - 1].T
            o = np.argsort(-lg, kind="stable")
            margins.append(float(lg[o[0]] - lg[o[1]]))
            codes.append(int(o[0]))
            cp_seq.append(heads.cp_embed(g, codes[g]))
        frames.append(codes)
        seq.append(heads.frame_sum(codes) + tts_pad)
    return frames, generated, margins


def hf_stack(w, d, prefix):
    """transformers' Qwen3Model holding the stack under `prefix` of `w`, as rows [T, H] -> post-norm hidden [T, H]."""
    import torch
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=8, hidden_size=d["hidden"], intermediate_size=d["inter"], num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"], num_key_value_heads=d["kv_heads"], head_dim=d["head_dim"],
        max_position_embeddings=4096, rms_norm_eps=d["eps"], hidden_act="silu", attention_bias=False,
        use_sliding_window=False, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": d["theta"]})
    model = transformers.AutoModel.from_config(config, attn_implementation="eager").float().eval()
    assert type(model).__name__ == "Qwen3Model", type(model)
    # Only the stack: the codec/text embeddings under the same prefix are the caller's.
    state = {k[len(prefix):]: torch.from_numpy(v) for k, v in w.items()
             if k.startswith(prefix + "layers.") or k == prefix + "norm.weight"}
    state["embed_tokens.weight"] = model.embed_tokens.weight.detach().clone()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    inv = model.rotary_emb.inv_freq.double()
    want = d["theta"] ** (-torch.arange(0, d["head_dim"], 2).double() / d["head_dim"])
    assert torch.allclose(inv, want, rtol=1e-5), "rope_theta not applied"

    def run(rows):
        with torch.no_grad():
            x = torch.from_numpy(np.asarray(rows, dtype=np.float32))[None]
            return model(inputs_embeds=x).last_hidden_state[0].double().numpy()
    return run


def fake_stack(width):
    """A deterministic causal stand-in for a Qwen3 stack, for the self-test only."""
    def run(rows):
        assert rows.ndim == 2 and rows.shape[1] == width, rows.shape
        c = np.cumsum(rows, axis=0) / np.arange(1, len(rows) + 1)[:, None]
        return np.tanh(c) * 2.0
    return run


def run_all(w, cfg, tokenize, talker_stack, predictor_stack, out_dir, save):
    heads = Heads(w, cfg)
    codec_head = heads.w["talker.codec_head.weight"]
    cp_heads = [heads.w[f"talker.code_predictor.lm_head.{g}.weight"] for g in range(NUM_CODE_GROUPS - 1)]
    rng = np.random.default_rng(SEED + 1)
    ref = {}

    # Talker stack on arbitrary rows.
    x = rng.normal(0.0, 1.0, size=(21, TALKER["hidden"])).astype(np.float32)
    hid = talker_stack(x.astype(np.float64))
    save("talker_inputs.npy", x)
    save("talker_hidden.npy", hid)
    save("talker_logits.npy", hid @ codec_head.T)
    ref["talker_stack"] = dict(inputs="talker_inputs.npy", hidden="talker_hidden.npy", logits="talker_logits.npy")

    # Code predictor, teacher-forced over given codes.
    past = rng.normal(0.0, 1.0, size=TALKER["hidden"]).astype(np.float32)
    codes = [int(rng.integers(0, CODEBOOK))] + [int(c) for c in rng.integers(0, CODEBOOK, size=NUM_CODE_GROUPS - 1)]
    rows = [past.astype(np.float64), heads.codec(codes[0])] + \
        [heads.cp_embed(g, codes[g]) for g in range(1, NUM_CODE_GROUPS - 1)]
    h = predictor_stack(heads.mtp(np.stack(rows)))
    cp_logits = np.stack([h[g] @ cp_heads[g - 1].T for g in range(1, NUM_CODE_GROUPS)])
    save("predictor_past_hidden.npy", past)
    save("predictor_logits.npy", cp_logits)
    ref["predictor"] = dict(past_hidden="predictor_past_hidden.npy", codes=codes, logits="predictor_logits.npy")

    xvector = rng.normal(0.0, 0.5, size=TALKER["hidden"]).astype(np.float32)
    save("base_xvector.npy", xvector)
    ref["prompts"] = []
    for req in REQUESTS + PROMPT_ONLY:
        rows, text_ids, prefix, tts_pad = build_prompt(req, heads, tokenize, xvector.astype(np.float64))
        entry = dict(req, text_ids=[int(i) for i in text_ids], codec_prefix=prefix, rows=f"prompt_{req['name']}.npy")
        save(entry["rows"], rows)
        if req in REQUESTS:
            frames, code0s, margins = generate(rows, tts_pad, heads, talker_stack, predictor_stack, codec_head,
                                               cp_heads)
            entry.update(frames=frames, code0s=code0s, min_margin=min(margins))
        ref["prompts"].append(entry)
    ref.update(max_frames=MAX_FRAMES, repetition_penalty=REPETITION_PENALTY, min_new_tokens=MIN_NEW_TOKENS,
               base_xvector="base_xvector.npy")
    return ref


def self_test():
    vocab, merges, tok_config, specials = tokenizer_files()
    assert vocab["assistant"] == 263 and specials["<|im_start|>"] == 265 and max(specials.values()) < TEXT_VOCAB
    ids = ascii_tokenize("<|im_start|>assistant\nHi you<|im_end|>\n", vocab, specials)
    assert ids == [265, 263, 10, ord("H"), ord("i"), ord(" "), ord("y"), ord("o"), ord("u"), 266, 10], ids
    assert ascii_tokenize("as sass", vocab, specials) == [256, ord(" "), ord("s"), 257], "merges by rank"
    cfg = config_json(specials, vocab)
    t = cfg["talker_config"]
    for k, v in list(CODEC_IDS.items()) + list(LANGUAGES.items()) + list(SPEAKERS.items()):
        assert CODEBOOK <= v < CODEC_VOCAB, (k, v)
    assert t["codec_eos_token_id"] >= CODEC_VOCAB - 1024
    w = make_weights()
    saved = {}
    tok = lambda s: ascii_tokenize(s, vocab, specials)  # noqa: E731
    ref = run_all(w, cfg, tok, fake_stack(TALKER["hidden"]), fake_stack(PREDICTOR["hidden"]), None,
                  lambda name, a: saved.__setitem__(name, np.asarray(a)))
    p = {e["name"]: e for e in ref["prompts"]}
    # English CustomVoice: think form with the language, the speaker row, pad, bos.
    assert p["custom_voice_english"]["codec_prefix"] == [t["codec_think_id"], t["codec_think_bos_id"],
                                                         LANGUAGES["english"], t["codec_think_eos_id"],
                                                         SPEAKERS["aiden"], t["codec_pad_id"], t["codec_bos_id"]]
    # Dialect speaker with Auto: the dialect's language id.
    assert p["dialect_auto_instructed"]["codec_prefix"][2] == LANGUAGES["sichuan_dialect"]
    assert p["base_xvector"]["codec_prefix"] == [t["codec_nothink_id"], t["codec_think_bos_id"],
                                                 t["codec_think_eos_id"], -1, t["codec_pad_id"], t["codec_bos_id"]]
    n_text = len(p["custom_voice_english"]["text_ids"])
    assert saved["prompt_custom_voice_english.npy"].shape == (3 + 6 + n_text + 2, TALKER["hidden"])
    n_instr = len(tok("<|im_start|>user\nSpeak slowly.<|im_end|>\n"))
    n_text2 = len(p["dialect_auto_instructed"]["text_ids"])
    assert saved["prompt_dialect_auto_instructed.npy"].shape[0] == n_instr + 3 + 6 + n_text2 + 2
    for e in ref["prompts"][:2]:
        assert all(len(f) == NUM_CODE_GROUPS for f in e["frames"]), e
        assert all(0 <= c < CODEBOOK for f in e["frames"] for c in f), e
        assert len(e["code0s"]) >= 1
    assert saved["predictor_logits.npy"].shape == (NUM_CODE_GROUPS - 1, CODEBOOK)
    logits = np.zeros(CODEC_VOCAB)
    logits[t["codec_eos_token_id"]] = 5.0
    logits[3] = 1.0
    assert np.argmax(talker_logits_processors(logits, [], t)) == 3  # min_new_tokens masks EOS
    assert np.argmax(talker_logits_processors(logits, [1, 2], t)) == t["codec_eos_token_id"]
    logits[CODEC_VOCAB - 1] = 9.0
    assert np.isneginf(talker_logits_processors(logits, [1, 2], t)[CODEC_VOCAB - 1])
    print("self-test passed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    self_test()
    if args.self_test:
        return 0
    import torch
    import transformers
    from safetensors.numpy import save_file
    from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

    torch.set_num_threads(8)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "make_tiny_qwen3_tts.log"), "w")
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "tiny_qwen3_tts")
        os.makedirs(root)
        vocab, merges, tok_config, specials = tokenizer_files()
        with open(os.path.join(root, "vocab.json"), "w") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(root, "merges.txt"), "w") as f:
            f.write(merges)
        with open(os.path.join(root, "tokenizer_config.json"), "w") as f:
            json.dump(tok_config, f, indent=2)
        try:
            hf_tok = Tokenizer(models.BPE.from_file(os.path.join(root, "vocab.json"),
                                                    os.path.join(root, "merges.txt")))
            hf_tok.normalizer = normalizers.NFC()
            hf_tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            hf_tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
            for s, i in specials.items():
                assert hf_tok.token_to_id(s) == i, (s, hf_tok.token_to_id(s), i)
        except Exception as e:  # the ASCII tokenizer above stands in; the log says so
            log.write(f"tokenizers pipeline unavailable, using the ASCII byte-level BPE: {e!r}\n")
            hf_tok = None
        mismatches = []

        def tokenize(s):
            if hf_tok is None:
                return ascii_tokenize(s, vocab, specials)
            got = hf_tok.encode(s, add_special_tokens=False).ids
            mine = ascii_tokenize(s, vocab, specials)
            if got != mine:
                mismatches.append((s, got, mine))
            return got

        cfg = config_json(specials, vocab)
        with open(os.path.join(root, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        with open(os.path.join(root, "generation_config.json"), "w") as f:
            json.dump(GENERATION_CONFIG, f, indent=2)
        w = make_weights()
        save_file(w, os.path.join(root, "model.safetensors"), metadata={"format": "pt"})

        talker_stack = hf_stack(w, TALKER, "talker.model.")
        predictor_stack = hf_stack(w, PREDICTOR, "talker.code_predictor.model.")

        def save(name, a):
            np.save(os.path.join(root, name), np.asarray(a, dtype=np.float32))

        ref = run_all(w, cfg, tokenize, talker_stack, predictor_stack, root, save)
        ref.update(tokenizer_mismatches=mismatches, transformers_version=transformers.__version__,
                   torch_version=torch.__version__)
        with open(os.path.join(root, "reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
        for e in ref["prompts"]:
            log.write(f"{e['name']}: text_ids={e['text_ids']} frames={len(e.get('frames', []))} "
                      f"code0s={e.get('code0s')} min_margin={e.get('min_margin')}\n")
        log.write(f"tokenizer mismatches: {mismatches}\nfiles: {sorted(os.listdir(root))}\n")
        with tarfile.open(os.path.join(args.out, "tiny_qwen3_tts.tar.gz"), "w:gz") as tar:
            tar.add(root, arcname="tiny_qwen3_tts")
    log.close()
    print(open(os.path.join(args.out, "make_tiny_qwen3_tts.log")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
