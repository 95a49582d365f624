#!/usr/bin/env python3
"""Builds a tiny random-weight Z-Image checkpoint in the diffusers layout.

    python3 make_tiny_z_image.py --diffusers DIR --chat-template TOKENIZER_CONFIG.json --out CKPT

DIR holds the `diffusers` package (a copy of the diffusers repository's src/ folder: the script puts
DIR on sys.path, so nothing is installed). TOKENIZER_CONFIG.json is a Qwen3 tokenizer_config.json
whose `chat_template` the tiny tokenizer takes (the real template, so the prompt is rendered as the
released tokenizer renders it). The checkpoint is what `ZImagePipeline.save_pretrained` writes:

    model_index.json   ZImagePipeline
    scheduler/         FlowMatchEulerDiscreteScheduler, 1000 train steps, shift 3.0, no dynamic shifting
    text_encoder/      a 3-layer Qwen3Model (hidden 64, GQA 2, tied embeddings), bf16, sharded
    tokenizer/         byte-level BPE (256 byte symbols, merges making "assistant" and "user" one
                       token each, Qwen's special tokens) + the Qwen3 chat template
    transformer/       ZImageTransformer2DModel: dim 64, 2 heads of 32, 2 noise + 2 context refiner
                       blocks, 3 joint blocks, 3-D RoPE axes (8, 12, 12), bf16, sharded
    vae/               AutoencoderKL: 16 latent channels, 3 up blocks (2 upsamplers: 4x), mid-block
                       attention, scaling 0.3611 / shift 0.1159, no (post-)quant conv, bf16

Every parameter is random (pad tokens and norm weights too, so none of them is a no-op) and rounded
to bfloat16 before saving; the VAE's conv_out is scaled so a random latent decodes mostly inside
[-1, 1] (a saturated image would make the 8-bit comparison trivial).
"""
import argparse
import json
import os
import sys
import tempfile

SEED = 20261202
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
WORD_MERGES = [("a", "s"), ("as", "s"), ("ass", "i"), ("assi", "s"), ("assis", "t"), ("assist", "a"),
               ("assista", "n"), ("assistan", "t"), ("u", "s"), ("us", "e"), ("use", "r")]
TEXT = dict(vocab=272, hidden=64, layers=3, heads=4, kv_heads=2, head_dim=16, inter=96, theta=1e6, eps=1e-6)
TRANSFORMER = dict(all_patch_size=[2], all_f_patch_size=[1], in_channels=16, dim=64, n_layers=3, n_refiner_layers=2,
                   n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=TEXT["hidden"],
                   rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 12, 12], axes_lens=[1024, 64, 64])
VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 3,
           up_block_types=["UpDecoderBlock2D"] * 3, block_out_channels=[16, 32, 32], layers_per_block=1,
           act_fn="silu", latent_channels=16, norm_num_groups=8, sample_size=64, scaling_factor=0.3611,
           shift_factor=0.1159, force_upcast=True, use_quant_conv=False, use_post_quant_conv=False,
           mid_block_add_attention=True)
SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False)
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
SHARD = "300KB"


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


def write_tokenizer(root, chat_template):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    os.makedirs(root, exist_ok=True)
    enc = bytes_to_unicode()
    vocab = {enc[b]: b for b in range(256)}
    for a, b in WORD_MERGES:
        vocab[a + b] = len(vocab)
    specials = {s: len(vocab) + i for i, s in enumerate(SPECIALS)}
    assert max(specials.values()) < TEXT["vocab"]
    with open(os.path.join(root, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(root, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in WORD_MERGES))
    tok = Tokenizer(models.BPE.from_file(os.path.join(root, "vocab.json"), os.path.join(root, "merges.txt")))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    for s, i in specials.items():
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s), i)
    tok.save(os.path.join(root, "tokenizer.json"))
    added = {str(i): dict(content=s, lstrip=False, normalized=False, rstrip=False, single_word=False,
                          special=s not in ("<think>", "</think>"))
             for s, i in specials.items()}
    config = dict(add_bos_token=False, add_prefix_space=False, added_tokens_decoder=added, bos_token=None,
                  chat_template=chat_template, eos_token="<|im_end|>", pad_token="<|endoftext|>", errors="replace",
                  model_max_length=131072, padding_side="right", split_special_tokens=False,
                  tokenizer_class="Qwen2Tokenizer", unk_token=None)
    with open(os.path.join(root, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    return specials


def randomize(module, torch):
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if p.ndim == 1 and leaf == "weight":
                p.copy_(1.0 + 0.2 * torch.randn_like(p))  # norm scales
            elif leaf == "bias":
                p.normal_(0.0, 0.1)
            elif "pad_token" in name:
                p.normal_(0.0, 0.5)
            elif "embed_tokens" in name:
                p.normal_(0.0, 0.5)
            else:
                fan_in = p[0].numel()
                p.normal_(0.0, 1.0 / fan_in ** 0.5)
            p.copy_(p.to(torch.bfloat16).float())


def build(args):
    sys.path.insert(0, os.path.abspath(args.diffusers))
    import torch
    import transformers
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel

    torch.manual_seed(SEED)
    with open(args.chat_template) as f:
        chat_template = json.load(f)["chat_template"]
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = os.path.join(tmp, "tokenizer")
        specials = write_tokenizer(tok_dir, chat_template)
        tokenizer = transformers.AutoTokenizer.from_pretrained(tok_dir)
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=True)
    assert rendered == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", repr(rendered)
    ids = tokenizer(rendered).input_ids
    assert ids[0] == specials["<|im_start|>"] and ids[1] == len(bytes_to_unicode()) + len(WORD_MERGES) - 1, ids

    t = TEXT
    kw = dict(vocab_size=t["vocab"], hidden_size=t["hidden"], num_hidden_layers=t["layers"],
              num_attention_heads=t["heads"], num_key_value_heads=t["kv_heads"], head_dim=t["head_dim"],
              intermediate_size=t["inter"], rms_norm_eps=t["eps"], max_position_embeddings=2048,
              hidden_act="silu", tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
              bos_token_id=specials["<|endoftext|>"], eos_token_id=specials["<|im_end|>"],
              rope_parameters={"rope_type": "default", "rope_theta": t["theta"]})
    text_encoder = transformers.Qwen3Model(transformers.Qwen3Config(**kw)).float().eval()
    randomize(text_encoder, torch)

    transformer = ZImageTransformer2DModel(**TRANSFORMER).float().eval()
    randomize(transformer, torch)

    vae = AutoencoderKL(**VAE).float().eval()
    randomize(vae, torch)
    with torch.no_grad():  # decode a random latent; scale conv_out so the image sits mostly inside [-1, 1]
        z = torch.randn(1, 16, 16, 16)
        img = vae.decode(z).sample
        gain = 0.45 / float(img.std())
        vae.decoder.conv_out.weight.mul_(gain)
        vae.decoder.conv_out.bias.mul_(gain)
        for p in (vae.decoder.conv_out.weight, vae.decoder.conv_out.bias):
            p.copy_(p.to(torch.bfloat16).float())

    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    pipe = ZImagePipeline(scheduler=scheduler, vae=vae.to(torch.bfloat16), text_encoder=text_encoder.to(torch.bfloat16),
                          tokenizer=tokenizer, transformer=transformer.to(torch.bfloat16))
    pipe.save_pretrained(args.out, max_shard_size=SHARD, safe_serialization=True)
    listing = {d: sorted(os.listdir(os.path.join(args.out, d))) for d in sorted(os.listdir(args.out))
               if os.path.isdir(os.path.join(args.out, d))}
    for d in ("scheduler", "text_encoder", "tokenizer", "transformer", "vae"):
        assert d in listing, (d, listing)
    assert any(f.endswith(".index.json") for f in listing["transformer"]), listing["transformer"]
    print(json.dumps(dict(checkpoint=args.out, files=listing), indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--diffusers", required=True, help="folder holding the diffusers package (diffusers/src)")
    ap.add_argument("--chat-template", required=True, help="a Qwen3 tokenizer_config.json with chat_template")
    ap.add_argument("--out", required=True)
    build(ap.parse_args())


if __name__ == "__main__":
    main()
