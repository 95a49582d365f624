#!/usr/bin/python3
"""Writes tests/data/tokenizer/corpus.jsonl, the strings the tokenizer golden test encodes.

Deterministic (fixed seed, no input files), so the corpus can be regenerated and reviewed:
    /usr/bin/python3 scripts/reference/make_tokenizer_corpus.py
Each line is {"text": "..."}. The hand-written part covers the cases a byte-level BPE tokenizer
gets wrong most easily (the regex alternatives, special tokens, NFC, whitespace); the generated
part mixes scripts, emoji sequences, numbers and whitespace at random.
"""
import json
import random
import unicodedata
from pathlib import Path

HAND_WRITTEN = [
    "",
    " ",
    "a",
    "Hello, world!",
    "Hello world",
    " Hello world",
    "  Hello   world  ",
    "hello\nworld",
    "hello\r\nworld\r\n",
    "line one\n\nline three\n\n\n",
    "\ttab\tseparated\tvalues\t",
    "trailing spaces   ",
    "   leading spaces",
    "mixed \t \n \r\n whitespace \u00a0 nbsp \u3000 ideographic space",
    "\u2028line separator\u2029paragraph separator\u0085next line",
    "I'm sure it's what they're saying: we've, I'll, he'd.",
    "I'M SURE IT'S WHAT THEY'RE SAYING: WE'VE, I'LL, HE'D.",
    "don't won't can't shouldn't y'all ma'am o'clock",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE",
    "Rock 'n' roll isn't dead, it's 'just' resting.",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "1234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "Order #12345 costs $1,234.56 (incl. 19% VAT) on 2024-03-15T12:34:56Z.",
    "Phone: +1 (555) 123-4567, ext. 89",
    "0x7fffffff 0b1010 1e-10 -42 +7 1_000_000",
    "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ०१२३४५६७८९ 〇一二三四五六七八九 ⅠⅡⅢⅣ ½ ¾ ² ³",
    "!!!???...,,,;;;:::---___***",
    "...and then?! \"Quoted\" 'single' `backtick` «guillemets» „German“ ‚low‘",
    "(parentheses) [brackets] {braces} <angles>",
    "a+b=c; x*y/z; p%q; m^n; ~not; a&&b||c",
    "https://www.example.com/path/to/page?query=value&other=123#fragment",
    "mailto:someone@example.org ftp://files.example.net/pub/file.tar.gz",
    "Visit http://localhost:8080/api/v1/chat/completions for the API.",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|><|endoftext|>",
    "text<|endoftext|>more text",
    " <|im_start|> spaced <|im_end|> ",
    "<think>\nLet me think about this.\n</think>\n\nThe answer is 42.",
    "<think></think>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "<tool_response>\n{\"temperature\": 21}\n</tool_response>",
    "<|vision_start|><|image_pad|><|vision_end|>Describe the image.",
    "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n<|fim_middle|>    return a + b",
    "<|repo_name|>omnistage<|file_sep|>src/main.cc",
    "<|im_start <|im_end| im_start|> <| |> <|unknown|>",
    "<|im_start|<|im_end|>",
    "<<|im_start|>>",
    "<THINK> <Think> </ think> < think>",
    "café naïve résumé coöperate façade jalapeño",
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301",
    "A\u030a \u212b \u00c5 Å",
    "\u1e9b\u0323 \u0073\u0323\u0307 \u1e69",
    "e\u0301\u0301\u0301 a\u0300\u0301\u0302\u0303\u0304",
    "\u1100\u1161\u11a8 \uac01 \u1112\u1161\u11ab\u1100\u1173\u11af",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "日本語のテキストです。東京は日本の首都です。",
    "中文文本测试：你好，世界！今天天气很好。",
    "繁體中文：臺灣、香港、澳門。",
    "한국어 텍스트입니다. 안녕하세요, 세계!",
    "Русский текст: Привет, мир! Как дела?",
    "Українська: Ґанок, їжак, єнот.",
    "Ελληνικά: Γειά σου Κόσμε! Αλφάβητο αβγδεζηθ.",
    "العربية: مرحبا بالعالم! كيف حالك؟",
    "العربية مع التشكيل: بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ",
    "עברית: שלום עולם! מה שלומך?",
    "हिन्दी: नमस्ते दुनिया! आप कैसे हैं?",
    "বাংলা: হ্যালো বিশ্ব!",
    "தமிழ்: வணக்கம் உலகம்!",
    "ไทย: สวัสดีชาวโลก! คุณสบายดีไหม",
    "Tiếng Việt: Xin chào thế giới! Tôi là người Việt Nam.",
    "ქართული: გამარჯობა მსოფლიო!",
    "Հայերեն: Բարեւ աշխարհ!",
    "አማርኛ: ሰላም ዓለም!",
    "ಕನ್ನಡ ತೆಲುగు മലയാളം ગુજરાતી ਪੰਜਾਬੀ ଓଡ଼ିଆ",
    "සිංහල ລາວ ខ្មែរ မြန်မာ བོད་ཡིག",
    "ᐃᓄᒃᑎᑐᑦ ᏣᎳᎩ ᚠᚢᚦᚨᚱᚲ 𐌰𐌱𐌲",
    "Türkçe: İstanbul, ığdır, şeker, çay.",
    "Polski: Zażółć gęślą jaźń.",
    "Deutsch: Größe, Straße, Übermäßig.",
    "Français : « Bonjour », dit-il — c'est l'été !",
    "Español: ¿Qué tal? ¡Muy bien!",
    "Mixed: English 中文 日本語 한국어 العربية עברית हिन्दी ไทย",
    "RTL mark \u200fשלום\u200e LTR mark; zero\u200bwidth\u200cnon\u200djoiner\ufeffBOM",
    "😀😃😄😁😆😅😂🤣",
    "👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿",
    "👨‍👩‍👧‍👦 👩‍❤️‍💋‍👨 🏳️‍🌈 🏴‍☠️ 👩🏽‍💻 🧑‍🤝‍🧑",
    "🇺🇸🇬🇧🇯🇵🇩🇪🇫🇷🇨🇳🇰🇷🇮🇳",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿 🏴󠁧󠁢󠁷󠁬󠁳󠁿",
    "1️⃣ 2️⃣ #️⃣ *️⃣ ©️ ®️ ™️",
    "Emoji in text: I ❤️ coding 💻 and ☕ every day! 🎉🎉🎉",
    "Math: ∀x∈ℝ, ∃y: x² + y² ≤ 1 ⇒ |x| ≤ 1; ∫₀^∞ e^{-x} dx = 1; ∑ᵢ aᵢ",
    "Box drawing: ┌─┬─┐ │ │ │ └─┴─┘ ░▒▓█",
    "Currency: $ € £ ¥ ₹ ₽ ₩ ₿ ¢",
    "Arrows → ← ↑ ↓ ↔ ⇒ ⇐ ⟶ and bullets • ◦ ▪ ▸",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <iostream>\n\nint main() {\n  std::cout << \"Hello\\n\";\n  return 0;\n}\n",
    "function add(a, b) {\n\treturn a + b;\n}\nconsole.log(add(1, 2)); // 3",
    "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<!DOCTYPE html>\n<html><head><title>Test</title></head><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "key: value\nlist:\n  - one\n  - two\nnested:\n  a: ~\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
    "\\documentclass{article}\n\\begin{document}\n$E = mc^2$\n\\end{document}",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "    indented code\n        more indented\n\t\ttabs\n",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares of evens",
    "a\u0000b",
    "\u0001\u0002\u0003\u001f\u007f",
    "\u00ad soft hyphen, \u2011 non-breaking hyphen, \u2013 en dash, \u2014 em dash",
    "ﬁ ﬂ ﬃ ｆｕｌｌｗｉｄｔｈ ﾊﾝｶｸ ㍻ ㎏ ℃ №",
    "𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝟙𝟚𝟛",
    "Private use: \ue000\ue001\uf8ff",
    "Supplementary: 𠀀𠀁𪚥 𓀀𓀁 🀄🃏",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abababababababababababababababababababababababababababababababab",
    "                                                                                ",
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
    "\t\t\t\t\t\t\t\t",
    "\r\n\r\n\r\n\r\n",
    " \n \n \n ",
    "word\n",
    "word \n",
    "word  \n  word",
    "!\n",
    "!!\r\n\r\n",
    "x\u00a0\u00a0y",
    "a\u3000\u3000b",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "C3PO R2-D2 HAL9000 B2B e2e i18n l10n",
    "2023年12月31日 23時59分",
    "ID: a1b2c3d4-e5f6-7890-abcd-ef1234567890",
    "SHA256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "base64: SGVsbG8sIHdvcmxkIQ==",
    "user@example.com, first.last+tag@sub.domain.co.uk",
    "@mention #hashtag $TICKER %percent ^caret &amp",
    "I said: \"Don't!\" — she replied: 'Why not?'",
    "camelCaseIdentifier snake_case_identifier SCREAMING_SNAKE kebab-case-name PascalCase",
    "__init__ __main__ _private self.__dict__",
    "ℌ𝔢𝔩𝔩𝔬 ɥǝllo ʍoɹlp",
]

SCRIPT_SAMPLES = {
    "latin": "the of and to in is you that it he was for on are as with his they at be this have from or one had by word but not what all were we when your can said there use an each which she do how their if will up other about out many then them these so some her would make like him into time has look two more write go see number no way could people my than first water been call who oil its now find long down day did get come made may part",
    "cyrillic": "и в не на я быть он с что а по это она этот к но они мы как из у который то за свой что весь год от так о для ты же все тот мочь вы человек такой его сказать только или ещё бы себя один как уже до время если сам когда другой",
    "greek": "και το να του η της με που την από για τα είναι σε ο οι στο θα δεν στην των ένα τη τον τις αλλά στα μου ότι στη όπως μας έχει",
    "cjk": "的一是不了在人有我他这个们中来上大为和国地到以说时要就出会可也你对生能而子那得于着下自之年过发后作里用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心她本前开但因只从想实",
    "japanese": "の に は を た が で て と し れ さ ある いる も する から な こと として い や れる など なっ ない この ため その あっ よう また もの という あり まで られ なる へ か だ これ によって により おり より による ず なり られる において ば なかっ なく しかし について せ だっ その後 できる それ う ので なお のみ でき き つ における および いう さらに でも ら たり その他 に関する たち ます ん なら 東京 日本 大学",
    "korean": "이 그 저 것 수 등 들 및 에서 그리고 하다 있다 되다 없다 않다 같다 보다 대한 우리 사람 때 년 한 말 일 문제 사회 중 생각 경우 나라 세계 정부 시간 이런 다시",
    "arabic": "في من على أن إلى عن مع هذا كان التي الذي ما لا هذه بين كل قد أو عند بعد ذلك حتى لم إذا ثم هو هي كما غير منذ",
    "hebrew": "של את על לא הוא זה עם כל אני גם היא אבל או יש מה אם כי היה רק אחד עוד לו כמו אין הם",
    "devanagari": "के है में की और से को का एक यह पर भी नहीं कि हैं ने था तो हो इस कर या लिए जो गया रहा कुछ वह",
    "thai": "ที่ และ ใน การ ของ เป็น ได้ มี ไม่ ให้ จะ ว่า ไป มา แต่ กับ นี้ คน อยู่ แล้ว ก็ ซึ่ง ความ เรา",
    "emoji": "😀 😂 🥲 😍 🤔 🙃 👍🏽 👋🏿 🙏 🎉 🔥 ✨ 💯 🚀 🌍 🇫🇷 🇯🇵 👨‍💻 👩‍🔬 ❤️ 🫠 🏳️‍⚧️",
}

PUNCTUATION = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["…", "—", "–", "«", "»", "“", "”", "‘", "’", "·", "•", "、", "。", "，", "！", "？", "：", "؟", "،", "।"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", " \t ", "\u00a0", "\u3000", "        "]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<tool_response>", "</tool_response>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'x"]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0323", "\u0331", "\u0655", "\u093c", "\u3099"]
CODE_LINES = [
    "for (int i = 0; i < n; ++i) {", "  sum += a[i] * b[i];", "}", "if x is None:", "    raise ValueError('x')",
    "return {k: v for k, v in d.items()}", "const x = await fetch(url);", "let mut s = String::new();",
    "public static void main(String[] args) {", "SELECT * FROM t;", "<div id=\"main\"></div>", "x <<= 2; y >>= 1;",
    "std::vector<std::pair<int, float>> v;", "print(f\"{name!r:>10}\")", "# comment", "// comment", "/* block */",
    "lambda x: x**2", "a != b && c == d", "`backtick` ${template}", "    ", "\t",
]


def random_number(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(10 ** rng.randrange(1, 25)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 8)}f}"
    if kind == 2:
        return f"{rng.randrange(1, 10 ** 9):,}"
    if kind == 3:
        return f"{rng.random():.3e}"
    if kind == 4:
        return "".join(rng.choice("0123456789") for _ in range(rng.randrange(30, 80)))
    return f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"


def random_word(rng, script):
    return rng.choice(SCRIPT_SAMPLES[script].split())


def random_mixed(rng):
    parts = []
    for _ in range(rng.randrange(3, 25)):
        r = rng.random()
        if r < 0.45:
            word = random_word(rng, rng.choice(list(SCRIPT_SAMPLES)))
            if rng.random() < 0.15:
                word = word.upper() if rng.random() < 0.5 else word.capitalize()
            parts.append(word)
        elif r < 0.55:
            parts.append(random_number(rng))
        elif r < 0.70:
            parts.append("".join(rng.choice(PUNCTUATION) for _ in range(rng.randrange(1, 5))))
        elif r < 0.78:
            parts.append(rng.choice(CONTRACTIONS))
        elif r < 0.84:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.90:
            base = random_word(rng, "latin")
            i = rng.randrange(len(base))
            parts.append(base[: i + 1] + rng.choice(COMBINING) + base[i + 1:])
        else:
            parts.append(rng.choice(WHITESPACE))
        parts.append(rng.choice(WHITESPACE) if rng.random() < 0.4 else (" " if rng.random() < 0.8 else ""))
    return "".join(parts)


def random_codepoints(rng):
    # Blocks assigned well before Unicode 14, so every engine's tables agree on their categories.
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE5B), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF),
              (0x3040, 0x30FF), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F)]
    out = []
    for _ in range(rng.randrange(5, 60)):
        lo, hi = rng.choice(blocks)
        cp = rng.randrange(lo, hi + 1)
        ch = chr(cp)
        if unicodedata.category(ch) in ("Cn", "Cs", "Co"):
            continue
        out.append(ch)
    return "".join(out)


def random_emoji_sequence(rng):
    skin = ["", "\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
    people = ["\U0001F468", "\U0001F469", "\U0001F466", "\U0001F467", "\U0001F9D1"]
    flags = ["US", "GB", "DE", "FR", "JP", "CN", "KR", "IN", "BR", "ZA", "EG", "IL", "TH", "GR", "UA"]
    out = []
    for _ in range(rng.randrange(1, 8)):
        r = rng.randrange(4)
        if r == 0:
            out.append("\u200d".join(rng.choice(people) + rng.choice(skin) for _ in range(rng.randrange(2, 5))))
        elif r == 1:
            code = rng.choice(flags)
            out.append("".join(chr(0x1F1E6 + ord(c) - ord("A")) for c in code))
        elif r == 2:
            out.append(rng.choice(["\U0001F44B", "\U0001F44D", "\U0001F64F", "\u270B", "\U0001F485"]) + rng.choice(skin))
        else:
            out.append(rng.choice(["\u2764\ufe0f", "\u2600\ufe0f", "\u263a\ufe0f", "\U0001F3F3\ufe0f\u200d\U0001F308"]))
        out.append(rng.choice(["", " ", "  ", "\n", "x"]))
    return "".join(out)


def random_whitespace(rng):
    pieces = [" ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", "\u0085", "a", "b", ".", "1", "\u4e2d"]
    return "".join(rng.choice(pieces) * rng.randrange(1, 6) for _ in range(rng.randrange(3, 20)))


def random_code(rng):
    lines = [rng.choice(["", "  ", "    ", "\t", "        "]) + rng.choice(CODE_LINES) for _ in range(rng.randrange(2, 10))]
    return rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])


def random_non_nfc(rng):
    # Decomposed (NFD) and compatibility text: NFC must recompose the former and leave the latter.
    text = rng.choice(["café crème brûlée", "Ångström über naïve", "Ελληνικά ώ ΐ", "한국어 조합", "ếệễ Việt Nam",
                       "Ḍḥṛṣṭ Sanskrit ā ī ū", "ﬁnal ﬂow ①②③ ㈱", "Ǆǅǆ Ǳǲǳ"])
    form = rng.choice(["NFD", "NFKD", "NFC"])
    return unicodedata.normalize(form, text) + rng.choice(["", "\u0301", "\u0308\u0301"])


def main():
    rng = random.Random(20260)
    texts = list(HAND_WRITTEN)
    generators = [random_mixed] * 200 + [random_codepoints] * 80 + [random_emoji_sequence] * 40 + \
                 [random_whitespace] * 40 + [random_code] * 40 + [random_non_nfc] * 30 + \
                 [lambda r: " ".join(random_number(r) for _ in range(r.randrange(1, 6)))] * 30
    for gen in generators:
        texts.append(gen(rng))
    # One long document, so that the measured encode speed is not dominated by call overhead.
    texts.append("\n\n".join(random_mixed(rng) for _ in range(60)))
    out = Path(__file__).resolve().parents[2] / "tests/data/tokenizer/corpus.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    print(f"wrote {len(texts)} strings to {out}")


if __name__ == "__main__":
    main()
