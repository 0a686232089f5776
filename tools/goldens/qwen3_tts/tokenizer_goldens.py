"""Golden ids for the Rust Qwen3-TTS text tokenizer (src/tokenizers/qwen2.rs), from the official stack.

usage: python tools/goldens/qwen3_tts/tokenizer_goldens.py [--configs DIR] [--tokenizer DIR] [--out FILE]

The official package (qwen-tts==0.1.1) loads its text tokenizer as
`AutoProcessor.from_pretrained(model_dir, fix_mistral_regex=True)` (qwen3_tts_model.py l.118) under
transformers==4.57.3. Because the folder's config.json says `transformers_version` 4.57.3, that
call replaces the Qwen2 split regex (`_patch_mistral_regex`). This script does the same load:
  - a folder is assembled from a real model folder's small files (config.json, tokenizer_config.json,
    preprocessor_config.json, ...) plus vocab.json and merges.txt;
  - the official `Qwen3TTSConfig` and `Qwen3TTSProcessor` classes are imported from the installed
    qwen-tts wheel by file, so that the package's torch-importing `__init__` is not run;
  - every case is encoded with `processor(text=...)`, which is what `_tokenize_texts` calls.
The same folder loaded with `fix_mistral_regex=False` gives the plain Qwen2 regex; its ids are
recorded for the cases where they differ, to show that the difference is real.

Writes tests/goldens/qwen3_tts/tokenizer_cases.json.
"""

import argparse
import hashlib
import importlib.util
import json
import random
import shutil
import sys
import tempfile
import unicodedata
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared" / "data"

# The three strings qwen3_tts_model.py builds (l.269-276).
def target(text):
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def reference(text):
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n"


ACCENTED = "café naïve résumé Ångström Øre coöperate façade Zürich"

FIXED = [
    ("mixed_case_words", "iPhone eBay McDonald"),
    ("mixed_case_more", "McDonald's iPhone HTTPServer XMLHttpRequest getHTTPResponseCode iOS macOS"),
    ("all_caps", "HELLO WORLD, THIS IS LOUD. NASA and the FBI."),
    ("sentence", "Hello, world! How are you today?"),
    ("contractions", "don't I'll we're they've she'd it's I'm"),
    ("contractions_upper", "DON'T I'LL WE'RE THEY'VE SHE'D IT'S I'M"),
    ("contractions_curly", "don\u2019t I\u2019ll \u201cquoted\u201d \u2018single\u2019"),
    ("numbers", "Call 555-0199 at 10:30am on 2024-03-15; pay $1,234.56 or 3.14159e10."),
    ("long_number", "12345678901234567890"),
    ("number_word_mix", "abc123def456 Qwen3 TTS12Hz 0.6B 1.7B 4x4"),
    ("punctuation_runs", "Wait... what?!?! --- (yes) [no] {maybe} <ok> *** ;;; ..."),
    ("punctuation_slashes", "a/b/c\n/usr/bin/env python3 //\n path/ \r\n and/\n"),
    ("url", "https://example.com/path?q=1&r=two#frag"),
    ("code", "fn main() { println!(\"hi\"); } if (x >= 10 && y != 3) { return x->y; }"),
    ("markdown", "# Title\n\n- item *one*\n- item **two**\n"),
    ("chinese", "你好，世界！今天天气很好。我们去公园散步吧。"),
    ("japanese", "こんにちは、世界。日本語のテキスト、カタカナとひらがな。東京タワー！"),
    ("korean", "안녕하세요, 세계! 한국어 텍스트입니다."),
    ("korean_nfd", unicodedata.normalize("NFD", "안녕하세요, 세계! 한국어 텍스트입니다.")),
    ("emoji", "I \u2764\ufe0f Rust \U0001f980\U0001f680 \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family \U0001f44d\U0001f3fd \U0001f1eb\U0001f1f7"),
    ("accents_nfc", unicodedata.normalize("NFC", ACCENTED)),
    ("accents_nfd", unicodedata.normalize("NFD", ACCENTED)),
    ("combining_marks", "e\u0301 cafe\u0301 n\u0303 \u0301\u0302\u0303 Z\u0335\u0327"),
    ("titlecase_letters", "\u01c5emal \u01c8ubljana \u01cb \u02b0\u02b2\u02b7 modifier \u02c8stress"),
    ("european", "Guten Tag! Schöne Grüße aus München. ¿Dónde está? Ça va ? Où est-il, Élodie ?"),
    ("cyrillic_greek", "Привет, мир! Как дела? Γειά σου Κόσμε"),
    ("rtl_indic_thai", "مرحبا بالعالم! שלום עולם नमस्ते दुनिया! สวัสดีชาวโลก"),
    ("mixed_scripts", "Qwen3-TTS说English和日本語とРусскийText混合McDonald的iPhone"),
    ("fullwidth", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３！"),
    ("newlines_crlf", "line one\r\nline two\n\n  indented\r\n\r\nend\n"),
    ("lone_cr", "a\rb\r\rc \r d"),
    ("multiple_spaces", "a  b   c    d\t\ttab  \n  x   "),
    ("leading_trailing_spaces", "   leading and trailing   "),
    ("only_spaces", "     "),
    ("only_newlines", "\n\n\n"),
    ("unicode_spaces", "nbsp\u00a0here\u00a0\u00a0two ideographic\u3000space line\u2028sep\u2029para"),
    ("invisible", "\ufeffBOM zero\u200bwidth\u200cjoin\u200d \u200fRTL\u200e \u202eoverride\u202c"),
    ("control_chars", "tab\tvt\x0bff\x0c nul\x00 esc\x1b[0m"),
    ("math_symbols", "∑∫∂√∞ ≤ ≥ ≠ ± × ÷ ½ ¼ ¾ ² ³ ①②③ Ⅻ ٠١٢٣ ०१२३"),
    ("empty", ""),
    ("special_tokens_inline", "<tts_pad><tts_text_bos>Hi<tts_text_eod><|endoftext|><|audio_pad|>"),
    ("special_tokens_spaced", " <|im_start|> user <|im_end|>\n<tts_text_bos_single> <think>x</think>"),
    ("special_lookalikes", "<|im_start |> <tts_pad <|IM_START|> <TTS_PAD> < tts_pad>"),
    ("target_wrapper", target("iPhone eBay McDonald, don't you think? 123.")),
    ("target_wrapper_cjk", target("你好，世界！こんにちは。")),
    ("target_wrapper_empty", target("")),
    ("reference_wrapper", reference("This is the reference transcript.\nSecond line.")),
    ("instruct_wrapper", instruct("Speak in a warm, cheerful voice; slightly faster. 用温柔的语气说。")),
    ("long_runs", "a" * 300 + " " + "Ab" * 100 + " " + "中" * 100 + " " + "1" * 50 + " " + "!" * 100),
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
    "नमस्ते"
    "\U0001f600\U0001f389\U0001f44d\U0001f3fd\u200d"
    "\u00a0\u200b\u3000\ufeff\u01c5\u02b0"
)


def random_cases(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 40, 80])
        out.append((f"random_{i:02}", "".join(rng.choice(POOL) for _ in range(length))))
    return out


def load_official(path, name):
    """Imports one module of the installed qwen-tts wheel by file (its package __init__ needs torch)."""
    spec = importlib.util.find_spec("qwen_tts")
    file = Path(spec.submodule_search_locations[0]) / path
    module_spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=SHARED / "qwen3-tts-configs" / "Qwen3-TTS-12Hz-0.6B-Base")
    ap.add_argument("--tokenizer", default=SHARED / "qwen3-tts-tokenizer")
    ap.add_argument("--out", default=REPO / "tests" / "goldens" / "qwen3_tts" / "tokenizer_cases.json")
    args = ap.parse_args()

    from transformers import AutoConfig, AutoProcessor

    config_mod = load_official("core/models/configuration_qwen3_tts.py", "qwen3_tts_configuration")
    processing_mod = load_official("core/models/processing_qwen3_tts.py", "qwen3_tts_processing")
    AutoConfig.register("qwen3_tts", config_mod.Qwen3TTSConfig)
    AutoProcessor.register(config_mod.Qwen3TTSConfig, processing_mod.Qwen3TTSProcessor)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for f in Path(args.configs).iterdir():
            if f.is_file():
                shutil.copy(f, folder / f.name)
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            shutil.copy(Path(args.tokenizer) / name, folder / name)
        official = AutoProcessor.from_pretrained(str(folder), fix_mistral_regex=True)
        plain = AutoProcessor.from_pretrained(str(folder), fix_mistral_regex=False)

    tok = official.tokenizer
    pre_official = json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]
    pre_plain = json.loads(plain.tokenizer.backend_tokenizer.to_str())["pre_tokenizer"]
    assert pre_official != pre_plain, "fix_mistral_regex changed nothing: check config.json's transformers_version"

    def ids(processor, text):
        return processor(text=text)["input_ids"][0]

    cases = []
    differ = []
    for name, text in FIXED + random_cases(40, 16):
        case = {"name": name, "text": text, "ids": ids(official, text)}
        case["decoded"] = tok.decode(case["ids"])
        plain_ids = ids(plain, text)
        if plain_ids != case["ids"]:
            case["plain_qwen2_ids"] = plain_ids
            differ.append(name)
        cases.append(case)

    special = [
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>",
        "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>", "assistant", "user", "\u010a",
    ]
    doc = {
        "produced_by": (
            f"qwen-tts {version('qwen-tts')} Qwen3TTSProcessor via AutoProcessor.from_pretrained(folder, "
            f"fix_mistral_regex=True), transformers {version('transformers')}, tokenizers {version('tokenizers')}; "
            "tools/goldens/qwen3_tts/tokenizer_goldens.py"
        ),
        "files": {
            "config.json": f"{Path(args.configs).name}/config.json",
            **{n: sha256(Path(args.tokenizer) / n) for n in ("vocab.json", "merges.txt", "tokenizer_config.json")},
        },
        "vocab_size_with_added": len(tok),
        "token_ids": {t: tok.convert_tokens_to_ids(t) for t in special},
        "pre_tokenizer_official": pre_official,
        "pre_tokenizer_plain_qwen2": pre_plain,
        "normalizer": json.loads(tok.backend_tokenizer.to_str())["normalizer"],
        "cases_that_differ": differ,
        "cases": cases,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, ensure_ascii=True, indent=1) + "\n")
    print(f"{len(cases)} cases, {len(differ)} differ from plain Qwen2: {', '.join(differ)} -> {out}")


if __name__ == "__main__":
    sys.exit(main())
