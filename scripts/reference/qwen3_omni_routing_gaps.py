#!/usr/bin/env python3
"""How close each prompt position of the tiny Qwen3-Omni thinker's references comes to a routing tie.

A bfloat16 run of a MoE model rounds the hidden states and the router logits to 8 significant bits.
Where the float32 reference's k-th and (k+1)-th router logits are closer than that rounding, the
bfloat16 run may pick the other expert, and that position's logits then differ by far more than
bfloat16 rounding. This script measures, for every prompt position of every reference
(make_tiny_qwen3_omni.py's text prompts, qwen3_omni_audio_reference.py's and
qwen3_omni_vision_reference.py's cases, rebuilt from the seeds their reference.json recorded), the
smallest gap between the k-th and (k+1)-th router logit over the MoE layers, in float32 on the CPU:

    routing_gaps_<i>.npy            text prompt i: [len] float32
    audio/case_<c>/routing_gaps.npy
    vision/case_<c>/routing_gaps.npy

Run on the GPU machine (torch 2.11, transformers 5.17) over the checkpoint folder the references
were made from; the files go next to the references (same layout under --out):

    python3 scripts/reference/qwen3_omni_routing_gaps.py --data tests/data/tiny_qwen3_omni --out DIR
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def gap_hooks(model, top_k, torch):
    """Forward hooks on the routers; `seen` collects each call's per-token gap [tokens]."""
    seen = []

    def hook(module, args, _output):
        x = args[0].reshape(-1, args[0].shape[-1]).float()
        top = torch.topk(x @ module.weight.float().t(), top_k + 1, dim=-1).values
        seen.append(top[:, top_k - 1] - top[:, top_k])

    handles = [m.register_forward_hook(hook) for n, m in model.named_modules()
               if n.startswith("thinker.") and n.endswith("mlp.gate")]
    return seen, handles


def gaps_of(model, top_k, torch, run):
    """Per position, the smallest gap over the MoE layers of one forward pass `run()` of a prompt."""
    seen, handles = gap_hooks(model, top_k, torch)
    with torch.no_grad():
        run()
    for h in handles:
        h.remove()
    return torch.stack(seen).min(dim=0).values.numpy().astype("float32")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="tests/data/tiny_qwen3_omni")
    ap.add_argument("--out", required=True, help="output folder (the same layout as --data)")
    args = ap.parse_args()
    import numpy as np
    import torch
    import transformers

    import qwen3_omni_audio_reference as audio_ref
    import qwen3_omni_vision_reference as vision_ref

    torch.set_num_threads(8)
    checkpoint = os.path.join(args.data, "per_expert")
    model = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        checkpoint, attn_implementation="eager", dtype=torch.float32).eval()
    thinker = model.thinker
    top_k = thinker.config.text_config.num_experts_per_tok
    summary = []

    def save(rel, gaps, tokens):
        assert gaps.shape == (tokens,), (rel, gaps.shape, tokens)
        path = os.path.join(args.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, gaps)
        summary.append(f"{rel}: {tokens} positions, smallest gap {gaps.min():.3e}, "
                       f"{int((gaps < 0.05).sum())} under 0.05, {int((gaps < 0.02).sum())} under 0.02")

    text = json.load(open(os.path.join(args.data, "reference.json")))
    for i, prompt in enumerate(text["prompts"]):
        ids = torch.tensor([prompt])
        save(f"routing_gaps_{i}.npy", gaps_of(model, top_k, torch, lambda: thinker(input_ids=ids)), len(prompt))

    audio = json.load(open(os.path.join(args.data, "audio", "reference.json")))
    processor, _, _ = audio_ref.make_processor(checkpoint, sys.stderr)
    for c, case in enumerate(audio["cases"]):
        waves = [audio_ref.waveform(n, case["waveform_seed"] + k, np) for k, n in enumerate(case["samples"])]
        inputs = processor(text=case["text"], audio=waves, return_tensors="pt")
        assert inputs["input_ids"][0].tolist() == case["input_ids"], f"audio case {c}: the ids differ"
        run = lambda: thinker(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                              input_features=inputs["input_features"].float(),
                              feature_attention_mask=inputs["feature_attention_mask"])
        save(f"audio/case_{c}/routing_gaps.npy", gaps_of(model, top_k, torch, run), len(case["input_ids"]))

    vision = json.load(open(os.path.join(args.data, "vision", "reference.json")))
    processor, _, size = vision_ref.make_processor(checkpoint, transformers)
    for c, (case, entry) in enumerate(zip(vision_ref.CASES, vision["cases"])):
        inputs, _, _, _, _, forward_extra = vision_ref.case_inputs(processor, case, entry["seed"], size)
        assert inputs["input_ids"][0].tolist() == entry["input_ids"], f"vision case {c}: the ids differ"
        run = lambda: thinker(**inputs, **forward_extra)
        save(f"vision/case_{c}/routing_gaps.npy", gaps_of(model, top_k, torch, run), len(entry["input_ids"]))
    print("\n".join(summary))
    with open(os.path.join(args.out, "routing_gaps.log"), "w") as f:
        f.write("\n".join(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
