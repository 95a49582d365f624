#!/usr/bin/env python3
"""The Hugging Face transformers peer of `omnistage bench latency`, and the copy bandwidth.

Run on the GPU machine (torch, transformers 5.x) in the same session as our benchmark
(scripts/gpu/run_on_gpu.sh does). For each model folder (a config.json is enough: the weights are
drawn at random on the GPU by transformers' own initialisation, which costs no checkpoint load and
times the same as trained weights) and each batch size, it times `model.generate` on random prompts
of --input-len tokens with exactly --output-len new tokens (greedy, EOS ignored):

  prefill_ms      one generate with max_new_tokens=1 (median of 3)
  decode_ms/step  (full generate - prefill) / (output_len - 1)

Modes: "eager" (attn_implementation="eager", the dynamic KV cache) and, with --compile, "compiled"
(static KV cache and torch.compile of the forward, tried on the first batch size only; whatever
fails is printed and recorded, not hidden; every model's eager runs come first). It also measures the device-to-device copy bandwidth
(bytes read plus bytes written over a 4 GiB copy, median of 20), the roofline's denominator.

    python3 hf_generate_bench.py --model DIR [--model DIR2] --batch-sizes 1,8,32,128,256 \
        --input-len 128 --output-len 256 --out results.json [--compile]
    python3 hf_generate_bench.py --self-test     # the torch-free arithmetic, any python3
"""
import argparse
import json
import statistics
import sys
import time
import traceback


def decode_ms_per_step(total_s, prefill_s, output_len):
    """Decode time per step: the generate time after the first token, over the remaining steps."""
    if output_len < 2:
        raise ValueError("output_len must be at least 2")
    return 1e3 * max(total_s - prefill_s, 0.0) / (output_len - 1)


def weight_bytes(config):
    """Bytes of bf16 weights a decode step reads (embedding rows are a lookup, so a tied
    embedding counts once, as the lm_head)."""
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    hd = config.get("head_dim") or h // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    inter, vocab = config["intermediate_size"], config["vocab_size"]
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * inter + 2 * h + 2 * hd
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return 2 * (layers * per_layer + embeddings + h)


def self_test():
    assert abs(decode_ms_per_step(1.255, 0.005, 251) - 5.0) < 1e-9
    qwen3_0_6b = {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "head_dim": 128,
                  "num_key_value_heads": 8, "intermediate_size": 3072, "vocab_size": 151936,
                  "tie_word_embeddings": True}
    # 596 M parameters (Qwen3-0.6B's model card: 0.6 B, 0.44 B without embeddings).
    assert abs(weight_bytes(qwen3_0_6b) / 2 - 596.05e6) < 0.1e6, weight_bytes(qwen3_0_6b) / 2
    print("self-test passed")


def copy_bandwidth(torch):
    n = 4 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / statistics.median(times)


def time_generate(torch, model, ids, new_tokens, **kwargs):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, **kwargs)
    torch.cuda.synchronize()
    assert out.shape[1] == ids.shape[1] + new_tokens, out.shape
    return time.perf_counter() - start


def measure(torch, model, vocab, batch, args, **kwargs):
    gen = torch.Generator(device="cuda").manual_seed(batch)
    ids = torch.randint(0, vocab, (batch, args.input_len), device="cuda", generator=gen)
    time_generate(torch, model, ids, 4, **kwargs)  # warm-up: kernels, cache allocation
    prefill = statistics.median(time_generate(torch, model, ids, 1, **kwargs) for _ in range(3))
    total = time_generate(torch, model, ids, args.output_len, **kwargs)
    return {"batch_size": batch, "prefill_ms": 1e3 * prefill,
            "decode_ms_per_step": decode_ms_per_step(total, prefill, args.output_len), "total_s": total,
            "output_tokens_per_s": batch * args.output_len / total}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--batch-sizes", default="1,8,32,128,256")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    results = {"torch": torch.__version__, "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name(0), "copy_bandwidth_bytes_per_s": copy_bandwidth(torch),
               "models": []}
    print(f"copy bandwidth: {results['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s (read + write)", flush=True)
    batches = [int(b) for b in args.batch_sizes.split(",")]

    def save():
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=2)

    def build(path):
        config = AutoConfig.from_pretrained(path)
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
        return model.eval(), config

    # Eager for every model first, so that a time limit cuts the compiled attempt, not the peer.
    for path in args.model:
        with open(f"{path}/config.json") as f:
            raw_config = json.load(f)
        entry = {"model": path, "weight_bytes": weight_bytes(raw_config), "eager": [], "compiled": []}
        entry["roofline_ms_per_step"] = 1e3 * entry["weight_bytes"] / results["copy_bandwidth_bytes_per_s"]
        results["models"].append(entry)
        model, config = build(path)
        print(f"{path}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, roofline "
              f"{entry['roofline_ms_per_step']:.3f} ms/step", flush=True)
        with torch.inference_mode():
            for batch in batches:
                row = measure(torch, model, config.vocab_size, batch, args)
                entry["eager"].append(row)
                save()
                print(f"  eager    batch {batch:4d}: prefill {row['prefill_ms']:9.2f} ms, decode "
                      f"{row['decode_ms_per_step']:8.3f} ms/step, {row['output_tokens_per_s']:9.0f} tok/s", flush=True)
        del model
        torch.cuda.empty_cache()

    if args.compile:
        entry = results["models"][0]
        batch = batches[0]
        how = 'static cache + torch.compile(forward, mode="reduce-overhead", fullgraph=True)'
        try:
            model, config = build(entry["model"])
            model.generation_config.cache_implementation = "static"
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
            with torch.inference_mode():
                row = measure(torch, model, config.vocab_size, batch, args)
            row["how"] = how
            entry["compiled"].append(row)
            print(f"  compiled batch {batch:4d}: prefill {row['prefill_ms']:9.2f} ms, decode "
                  f"{row['decode_ms_per_step']:8.3f} ms/step", flush=True)
        except Exception as e:  # recorded: the issue asks what worked and what did not
            message = "".join(traceback.format_exception_only(type(e), e)).strip()
            entry["compiled"].append({"batch_size": batch, "how": how, "error": message[-2000:]})
            print(f"  compiled batch {batch}: FAILED: {message[-600:]}", flush=True)
        save()


if __name__ == "__main__":
    sys.exit(main())
