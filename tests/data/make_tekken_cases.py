"""Golden ids for the Rust Tekken tokenizer tests, from mistral-common's Tekkenizer.

usage: python tests/data/make_tekken_cases.py TEKKEN_JSON OUT_JSON [--small] [--label=TEXT]

Encodes a fixed list of varied strings (plus seeded random ones) with
Tekkenizer.from_file(TEKKEN_JSON).encode(s, bos=False, eos=False) and writes
{"tokenizer": ..., "produced_by": ..., "cases": [{"text": s, "ids": [...]}, ...]}.
"""
import json
import random
import sys
from importlib.metadata import version
from pathlib import Path

from mistral_common.tokens.tokenizers.tekken import Tekkenizer

FIXED = [
    "Hello.",
    "Tab\tand\nnewline handling.",
    "Paris is a beautiful city!",
    "",
    " ",
    "  ",
    "   x",
    "x   ",
    "a  b",
    "a \t b",
    "\t\t",
    "\n",
    "\n\n\n",
    " \n ",
    "\r\n",
    "a\r\nb",
    "line one\nline two\r\nline three\n\n",
    "trailing spaces   ",
    "   leading spaces",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "HELLO WORLD",
    "McDonald's iPhone HTTPServer XMLHttpRequest",
    "don't won't it's I'm we're they've",
    "3.14159",
    "1,000,000",
    "1234567890",
    "abc123def456",
    "Call 555-0199 at 10:30am on 2024-03-15.",
    "$100.00 + 20% = €120,00",
    "a/b/c\n",
    "/usr/bin/env python3",
    "https://example.com/path?q=1&r=two#frag",
    "fn main() { println!(\"hi\"); }",
    "if (x >= 10 && y != 3) { return x->y; }",
    "# Title\n\n- item *one*\n- item **two**\n",
    "...!!!???",
    "\"quoted\" 'single' «guillemets» „German“",
    "em—dash en–dash ellipsis…",
    "Bonjour tout le monde ! Comment allez-vous aujourd'hui ?",
    "Il fait très beau ce matin : le soleil brille.",
    "Ça va ? Où est la boulangerie ? Ôtez-vous de là, Élodie.",
    "Guten Tag! Schöne Grüße aus München. Straße, Größe.",
    "¿Dónde está la biblioteca? ¡Hola, señor!",
    "Olá, tudo bem? Não sei. Coração.",
    "Dag allemaal, hoe gaat het? Ĳsselmeer.",
    "Buongiorno, come stai? Però è così.",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "你好，世界！今天天气很好。",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 텍스트입니다.",
    "مرحبا بالعالم! كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया! आप कैसे हैं?",
    "สวัสดีชาวโลก",
    "Xin chào thế giới",
    "Merhaba dünya, İstanbul ılık.",
    "e\u0301 cafe\u0301 n\u0303",
    "\u0301\u0302\u0303",
    "ǅemal ǈubljana ǋ",
    "ʰʲʷ modifier ˈstress",
    "\x00",
    "a\x00b\x00\x00c",
    "\x01\x02\x03\x07\x1b[0m",
    "\ufeffBOM start",
    "zero\u200bwidth\u200cjoin\u200d",
    "nbsp\u00a0here\u00a0\u00a0two",
    "ideographic\u3000space",
    "line\u2028separator\u2029para",
    "\u200fRTL mark\u200e LTR mark",
    "\u202eoverride\u202c",
    "👍",
    "👍🏽 thumbs",
    "👨‍👩‍👧‍👦 family",
    "🇫🇷🇺🇸🇯🇵 flags",
    "emoji in text 😀 and 🎉 party",
    "😀😃😄😁😆😅😂🤣😊😇🙂🙃😉😌😍🥰😘😗😙😚😋😛😝😜🤪🤨🧐🤓😎🥸🤩🥳",
    "∑∫∂√∞ ≤ ≥ ≠ ± × ÷",
    "½ ¼ ¾ ² ³ ①②③ Ⅻ",
    "٠١٢٣٤٥٦٧٨٩ ०१२३",
    "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
    "a" * 300,
    "A" * 300,
    "Ab" * 150,
    "ab" * 150 + "A",
    " " * 200 + "x",
    " " * 5000,
    "\n" * 500,
    " \n" * 200,
    "!" * 400,
    "!/" * 100 + "\n",
    "中" * 150,
    "\u0301" * 120,
    "1" * 300,
    "x" + "\t" * 50 + "y",
    "word " * 200,
    "Mixed CASE words AND MORE Words. " * 20,
]

POOL = (
    "abcdefghijklmnopqrstuvwxyz"
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    "0123456789"
    "     \t\n\r"
    ".,;:!?'\"()[]{}<>/\\-_+=*&^%$#@~`|"
    "éèêàçôûüöäßñÉÀÇ"
    "\u0301\u0308"
    "абвгдАБВГД"
    "中文字日本語かなカナ한국"
    "مرحبا"
    "שלום"
    "नमस्ते"
    "😀🎉👍🏽\u200d"
    "\x00\u00a0\u200b\u3000\u2028\ufeff"
)


def random_cases(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 40, 80, 160])
        out.append("".join(rng.choice(POOL) for _ in range(length)))
    return out


def paragraph():
    rng = random.Random(7)
    words = FIXED[19:60]
    return " ".join(rng.choice(words) for _ in range(120))[:4096]


def main():
    src, dst = sys.argv[1], sys.argv[2]
    small = "--small" in sys.argv
    label = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--label=")), None)
    tok = Tekkenizer.from_file(src)
    texts = FIXED[:60] + random_cases(40, 1) if small else FIXED + random_cases(110, 1) + [paragraph()]
    cases = [{"text": s, "ids": tok.encode(s, bos=False, eos=False)} for s in texts]
    doc = {
        "tokenizer": label or Path(src).name,
        "produced_by": f"mistral-common {version('mistral-common')} Tekkenizer.encode(s, bos=False, eos=False), "
        f"tiktoken {version('tiktoken')}; tests/data/make_tekken_cases.py",
        "cases": cases,
    }
    Path(dst).write_text(json.dumps(doc, ensure_ascii=True, separators=(",", ":")) + "\n")
    print(f"{len(cases)} cases, {sum(len(c['ids']) for c in cases)} ids -> {dst}")


if __name__ == "__main__":
    main()
