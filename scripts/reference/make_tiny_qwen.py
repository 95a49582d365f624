#!/usr/bin/env python3
"""Builds tiny random-weight Qwen3/Qwen2 checkpoints and their Hugging Face reference outputs.

Run once on the GPU machine (transformers 5.x, torch); the results go to tests/data/tiny_qwen/:
one folder per model with the checkpoint as save_pretrained wrote it (config.json optionally
rewritten to the transformers-4 schema), `reference.json` (prompts, greedy continuations) and
`logits_<i>.npy` (float32 logits of prompt i at every position, shape [len, vocab]).

    python3 make_tiny_qwen.py --out DIR          # writes DIR/tiny_qwen.tar.gz
    python3 make_tiny_qwen.py --self-test        # checks the torch-free logic (any python3 + numpy)

The reference is computed in float32 on the CPU with attn_implementation="eager"; a checkpoint
saved in bfloat16 has its weights rounded to bfloat16 *before* the reference is computed, so the
reference is exactly the float32 computation over the weights on disk. The greedy continuation
re-runs the whole sequence at every step (no KV cache), ignoring EOS, so it is the plain argmax
chain of the model.
"""
import argparse
import inspect
import json
import os
import sys
import tarfile
import tempfile

import numpy as np

# name, family, shapes, storage. Together they cover GQA ratios 1, 2, 3 and MQA, head_dim
# different from hidden/heads, tied and untied embeddings, bf16 and f32 on disk, both
# config.json schemas, a sharded checkpoint and sliding-window layers.
MODELS = [
    dict(name="qwen3_gqa2_tied_bf16_v5", family="qwen3", vocab=384, hidden=64, heads=4, kv_heads=2,
         head_dim=16, inter=96, tied=True, dtype="bfloat16", schema="v5", rope_theta=1e6, eps=1e-6),
    dict(name="qwen3_mha_untied_f32_v4", family="qwen3", vocab=320, hidden=48, heads=3, kv_heads=3,
         head_dim=32, inter=80, tied=False, dtype="float32", schema="v4", rope_theta=10000.0, eps=1e-5),
    dict(name="qwen3_gqa3_tied_f32_v4_sharded", family="qwen3", vocab=512, hidden=96, heads=6, kv_heads=2,
         head_dim=20, inter=160, tied=True, dtype="float32", schema="v4", rope_theta=1e6, eps=1e-6,
         shard="60KB"),
    dict(name="qwen3_mqa_untied_bf16_v5_sliding", family="qwen3", vocab=300, hidden=32, heads=4, kv_heads=1,
         head_dim=12, inter=64, tied=False, dtype="bfloat16", schema="v5", rope_theta=5e5, eps=1e-6,
         sliding_window=6),
    dict(name="qwen2_gqa2_untied_bf16_v4_sliding", family="qwen2", vocab=400, hidden=64, heads=4, kv_heads=2,
         head_dim=16, inter=112, tied=False, dtype="bfloat16", schema="v4", rope_theta=1e6, eps=1e-6,
         sliding_window=7),
    dict(name="qwen2_mqa_tied_f32_v5", family="qwen2", vocab=256, hidden=48, heads=3, kv_heads=1,
         head_dim=16, inter=72, tied=True, dtype="float32", schema="v5", rope_theta=10000.0, eps=1e-6),
    dict(name="qwen2_gqa3_untied_f32_v5", family="qwen2", vocab=280, hidden=96, heads=6, kv_heads=2,
         head_dim=16, inter=128, tied=False, dtype="float32", schema="v5", rope_theta=1e6, eps=1e-6),
]
PROMPT_LENGTHS = [1, 9, 37]  # 37 crosses two KV blocks of 16
NEW_TOKENS = 24
LAYERS = 2


def prompts_for(spec, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, spec["vocab"], size=n).tolist() for n in PROMPT_LENGTHS]


def eos_ids_for(spec):
    return [spec["vocab"] - 1, spec["vocab"] - 2]


def to_v4_schema(config):
    """Rewrites a transformers-5 config.json dict into the transformers-4 schema real checkpoints use."""
    out = dict(config)
    params = out.pop("rope_parameters", None)
    if params is not None:
        params = dict(params)
        out["rope_theta"] = params.pop("rope_theta")
        rope_type = params.pop("rope_type", "default")
        out["rope_scaling"] = None if rope_type == "default" and not params else dict(params, rope_type=rope_type)
    if "dtype" in out:
        out["torch_dtype"] = out.pop("dtype")
    # transformers 4 derives the layer kinds from use_sliding_window/max_window_layers.
    out.pop("layer_types", None)
    out["transformers_version"] = "4.51.3"
    return out


def config_kwargs(spec):
    kw = dict(vocab_size=spec["vocab"], hidden_size=spec["hidden"], num_hidden_layers=LAYERS,
              num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
              intermediate_size=spec["inter"], tie_word_embeddings=spec["tied"], rms_norm_eps=spec["eps"],
              max_position_embeddings=128, hidden_act="silu", bos_token_id=spec["vocab"] - 3,
              eos_token_id=spec["vocab"] - 1)
    if spec["family"] == "qwen3":
        kw.update(head_dim=spec["head_dim"], attention_bias=False)
    else:
        assert spec["head_dim"] * spec["heads"] == spec["hidden"], "Qwen2 has head_dim = hidden / heads"
    if spec.get("sliding_window"):
        # Layer 0 full, layer 1 sliding (transformers: layers >= max_window_layers slide).
        kw.update(use_sliding_window=True, sliding_window=spec["sliding_window"], max_window_layers=1)
    else:
        kw.update(use_sliding_window=False)
    return kw


def self_test():
    v5 = {"architectures": ["Qwen3ForCausalLM"], "dtype": "bfloat16", "layer_types": ["full_attention"],
          "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "hidden_size": 64}
    v4 = to_v4_schema(v5)
    assert v4["rope_theta"] == 1e6 and v4["rope_scaling"] is None and v4["torch_dtype"] == "bfloat16", v4
    assert "rope_parameters" not in v4 and "dtype" not in v4 and "layer_types" not in v4, v4
    scaled = to_v4_schema({"rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0}})
    assert scaled["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0}, scaled
    names = [m["name"] for m in MODELS]
    assert len(set(names)) == len(names)
    ratios = {m["heads"] // m["kv_heads"] for m in MODELS if m["kv_heads"] > 1}
    assert {1, 2, 3} <= ratios and any(m["kv_heads"] == 1 for m in MODELS)
    assert any(m["head_dim"] * m["heads"] != m["hidden"] for m in MODELS)
    for m in MODELS:
        config_kwargs(m)
        ps = prompts_for(m, 1)
        assert [len(p) for p in ps] == PROMPT_LENGTHS and max(max(p) for p in ps) < m["vocab"]
        assert m["heads"] % m["kv_heads"] == 0
    print("self-test passed")


def build(spec, root, torch, transformers, log):
    from safetensors import safe_open

    torch.manual_seed(1234)
    cls_config = transformers.Qwen3Config if spec["family"] == "qwen3" else transformers.Qwen2Config
    kw = config_kwargs(spec)
    if "rope_parameters" in inspect.signature(cls_config.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": spec["rope_theta"]}
    else:
        kw["rope_theta"] = spec["rope_theta"]
    config = cls_config(**kw)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.float().eval()
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif "embed_tokens" in name or "lm_head" in name:
                p.normal_(0.0, 0.5)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.3)
            else:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
            if spec["dtype"] == "bfloat16":
                p.copy_(p.to(torch.bfloat16).float())
    inv_freq = model.model.rotary_emb.inv_freq.double()
    expected = spec["rope_theta"] ** (-torch.arange(0, spec["head_dim"], 2).double() / spec["head_dim"])
    assert torch.allclose(inv_freq, expected, rtol=1e-5), (spec["name"], "rope_theta not applied")
    want_kinds = ["full_attention", "sliding_attention" if spec.get("sliding_window") else "full_attention"]
    assert list(model.config.layer_types) == want_kinds, (spec["name"], model.config.layer_types)
    q = model.model.layers[0].self_attn.q_proj.weight
    assert q.shape[0] == spec["heads"] * spec["head_dim"], (spec["name"], q.shape)

    prompts = prompts_for(spec, seed=len(spec["name"]))
    logits_files, continuations, margins = [], [], []
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            ids = torch.tensor([prompt])
            logits = model(ids).logits[0].float().numpy()
            fname = f"logits_{i}.npy"
            logits_files.append(fname)
            out_dir = os.path.join(root, spec["name"])
            os.makedirs(out_dir, exist_ok=True)
            np.save(os.path.join(out_dir, fname), logits.astype(np.float32))
            seq = list(prompt)
            generated, step_margins = [], []
            for _ in range(NEW_TOKENS):
                last = model(torch.tensor([seq])).logits[0, -1].float()
                top = torch.topk(last, 2)
                step_margins.append(float(top.values[0] - top.values[1]))
                nxt = int(top.indices[0])
                generated.append(nxt)
                seq.append(nxt)
            continuations.append(generated)
            margins.append(min(step_margins))

    out_dir = os.path.join(root, spec["name"])
    save_kw = {}
    if spec.get("shard"):
        save_kw["max_shard_size"] = spec["shard"]
    dtype = torch.bfloat16 if spec["dtype"] == "bfloat16" else torch.float32
    model.to(dtype).save_pretrained(out_dir, safe_serialization=True, **save_kw)
    gen = transformers.GenerationConfig(eos_token_id=eos_ids_for(spec), bos_token_id=spec["vocab"] - 3,
                                        do_sample=True, temperature=0.7, top_p=0.8, top_k=20)
    gen.save_pretrained(out_dir)

    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    if spec["schema"] == "v4":
        cfg = to_v4_schema(cfg)
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
    else:
        assert "rope_parameters" in cfg, "transformers did not write the v5 schema"

    files = sorted(os.listdir(out_dir))
    if spec.get("shard"):
        assert "model.safetensors.index.json" in files, files
    keys = []
    for fn in files:
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(out_dir, fn), "pt") as st:
                keys += list(st.keys())
    assert ("lm_head.weight" in keys) != spec["tied"], (spec["name"], "lm_head.weight presence")

    # The written checkpoint (with the rewritten config) must reload to the same logits.
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager",
                                                                 dtype=torch.float32).eval()
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            again = reloaded(torch.tensor([prompt])).logits[0].float().numpy()
            ref = np.load(os.path.join(out_dir, logits_files[i]))
            err = float(np.abs(again - ref).max() / np.abs(ref).max())
            assert err < 1e-6, (spec["name"], "reload differs", err)

    reference = dict(model=spec, prompts=prompts, logits=logits_files, greedy_continuations=continuations,
                     min_top2_margin=margins, eos_token_ids=eos_ids_for(spec),
                     transformers_version=transformers.__version__, torch_version=torch.__version__)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
    log.write(f"{spec['name']}: ok files={files} min margins={margins}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="folder for tiny_qwen.tar.gz and make_tiny_qwen.log")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    self_test()
    import torch
    import transformers

    torch.set_num_threads(4)
    os.makedirs(args.out, exist_ok=True)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp, open(os.path.join(args.out, "make_tiny_qwen.log"), "w") as log:
        root = os.path.join(tmp, "tiny_qwen")
        for spec in MODELS:
            try:
                build(spec, root, torch, transformers, log)
            except Exception as e:  # keep going: one bad variant must not cost the others
                import traceback
                failures += 1
                log.write(f"{spec['name']}: FAILED {e!r}\n{traceback.format_exc()}\n")
            log.flush()
        with tarfile.open(os.path.join(args.out, "tiny_qwen.tar.gz"), "w:gz") as tar:
            tar.add(root, arcname="tiny_qwen")
    print(open(os.path.join(args.out, "make_tiny_qwen.log")).read())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
