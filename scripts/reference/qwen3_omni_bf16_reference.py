#!/usr/bin/env python3
"""What bfloat16 does to the tiny Qwen3-Omni thinker's float32 references, as transformers runs it.

A bfloat16 run of a MoE model rounds the hidden states and the router logits to 8 significant bits.
Where the float32 reference's k-th and (k+1)-th router logits are closer than that rounding, the
bfloat16 run may pick the other expert, and that position's logits then differ by far more than
rounding; elsewhere rounding alone moves them. For every prompt position of every reference
(make_tiny_qwen3_omni.py's text prompts, qwen3_omni_audio_reference.py's and
qwen3_omni_vision_reference.py's cases, rebuilt from the seeds their reference.json recorded) this
script writes

    routing_gaps_<i>.npy / <case>/routing_gaps.npy   the smallest gap between the k-th and (k+1)-th
        router logit over the MoE layers, float32 on the CPU: [len] float32
    bf16_errors_<i>.npy / <case>/bf16_errors.npy     transformers' own bfloat16 run on the GPU
        (weights, activations and inputs in bfloat16): each position's max |logit - reference| /
        max |reference|, against the float32 logits the reference stored: [len] float32

for text prompt i and audio/case_<c>, vision/case_<c>. Run on the GPU machine (torch 2.11,
transformers 5.17) over the checkpoint folder the references were made from; the files go next
to the references (same layout under --out):

    python3 scripts/reference/qwen3_omni_bf16_reference.py --data tests/data/tiny_qwen3_omni --out DIR
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


def bf16_errors(model, reference, inputs, extra, torch):
    """transformers' bfloat16 thinker on the GPU over `inputs` (its float tensors cast): each
    position's relative error against the float32 `reference` logits [len, vocab]."""
    def move(v):
        if not torch.is_tensor(v):
            return v  # e.g. the processor's video_second_per_grid list
        return v.to("cuda", torch.bfloat16) if v.is_floating_point() else v.to("cuda")

    moved = {k: move(v) for k, v in inputs.items()}
    with torch.no_grad():
        logits = model(**moved, **extra).logits[0].float().cpu().numpy()
    assert logits.shape == reference.shape, (logits.shape, reference.shape)
    import numpy as np

    ref = reference.astype(np.float64)
    err = np.abs(logits.astype(np.float64) - ref).max(axis=1) / np.abs(ref).max(axis=1)
    return err.astype(np.float32)


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

    bf16 = transformers.Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        checkpoint, attn_implementation="eager", dtype=torch.bfloat16).to("cuda").eval().thinker

    def save(rel, name, values, tokens):
        assert values.shape == (tokens,), (rel, name, values.shape, tokens)
        path = os.path.join(args.out, rel.replace("{}", name))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        np.save(path, values)

    def measure(rel, run, inputs, extra, reference):
        gaps = gaps_of(model, top_k, torch, run)
        errors = bf16_errors(bf16, reference, inputs, extra, torch)
        save(rel, "routing_gaps", gaps, reference.shape[0])
        save(rel, "bf16_errors", errors, reference.shape[0])
        held = errors[gaps >= 0.1]
        summary.append(f"{rel.replace('{}', '*')}: {reference.shape[0]} positions, smallest gap {gaps.min():.3e}, "
                       f"{int((gaps < 0.1).sum())} under 0.1; transformers bf16 error worst {errors.max():.4f}, "
                       f"worst at gaps >= 0.1 {held.max() if held.size else 0:.4f}")

    text = json.load(open(os.path.join(args.data, "reference.json")))
    for i, prompt in enumerate(text["prompts"]):
        ids = torch.tensor([prompt])
        reference = np.load(os.path.join(args.data, f"logits_{i}.npy"))
        measure(f"{{}}_{i}.npy", lambda: thinker(input_ids=ids), dict(input_ids=ids), {}, reference)

    audio = json.load(open(os.path.join(args.data, "audio", "reference.json")))
    processor, _, _ = audio_ref.make_processor(checkpoint, sys.stderr)
    for c, case in enumerate(audio["cases"]):
        waves = [audio_ref.waveform(n, case["waveform_seed"] + k, np) for k, n in enumerate(case["samples"])]
        inputs = processor(text=case["text"], audio=waves, return_tensors="pt")
        assert inputs["input_ids"][0].tolist() == case["input_ids"], f"audio case {c}: the ids differ"
        fields = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                      input_features=inputs["input_features"].float(),
                      feature_attention_mask=inputs["feature_attention_mask"])
        reference = np.load(os.path.join(args.data, "audio", f"case_{c}", "logits.npy"))
        measure(f"audio/case_{c}/{{}}.npy", lambda: thinker(**fields), fields, {}, reference)

    vision = json.load(open(os.path.join(args.data, "vision", "reference.json")))
    processor, _, size = vision_ref.make_processor(checkpoint, transformers)
    for c, (case, entry) in enumerate(zip(vision_ref.CASES, vision["cases"])):
        inputs, _, _, _, _, forward_extra = vision_ref.case_inputs(processor, case, entry["seed"], size)
        assert inputs["input_ids"][0].tolist() == entry["input_ids"], f"vision case {c}: the ids differ"
        reference = np.load(os.path.join(args.data, "vision", f"case_{c}", "logits.npy"))
        measure(f"vision/case_{c}/{{}}.npy", lambda: thinker(**inputs, **forward_extra), dict(inputs), forward_extra,
                reference)
    print("\n".join(summary))
    with open(os.path.join(args.out, "bf16_reference.log"), "w") as f:
        f.write("\n".join(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
