"""XTTS-v2 tokenizer goldens from coqui-tts 0.28.0's own VoiceBpeTokenizer.

Runs the reference tokenizer on tests/goldens/xtts/vocab.json (written by the Rust generator:
`cargo test --features testkit --test it write_vocab -- --ignored`) over tricky strings per
language and writes tests/goldens/xtts/tokenizer_cases.json: for each case the cleaned text
(`preprocess_text`) and the ids (`encode`), or the exception the reference raises. Two paths:
"encode" is `VoiceBpeTokenizer.encode(text, lang)`, "sentence" is what `Xtts.inference` does
per sentence (`encode(text.strip().lower(), lang)`).

    .deps/xtts-ref-venv/bin/python tools/goldens/xtts/make_tokenizer_goldens.py
"""

import importlib.metadata as metadata
import json
import logging
import pathlib
import random
import re

from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[3]
OUT = ROOT / "tests/goldens/xtts"

# Languages whose numbers are expanded on the Rust side; the others only without digits.
NUMBER_LANGUAGES = {"en", "fr", "de"}
ROMANISED = {"zh-cn", "ja"}

COMMON = [
    "Hello world.",
    "  Leading and trailing spaces  ",
    "Mixed\tTabs\nand\r\nnewlines   here",
    'He said "no" & she said "yes"!',
    "Tom & Jerry @ home #hash 50% off £ $ ° signs",
    "Questions? Answers! (parentheses) [brackets] {braces} ...",
    "UPPERCASE lowercase MiXeD",
    "unknown ✓ emoji 🙂 and CJK 漢字",
    "a\u00a0non-breaking\u2003em space\u001ffile separator",
    "decomposed e\u0301 and composed é",
    "",
    "   ",
]

PER_LANGUAGE = {
    "en": [
        "Mr. Smith, Mrs. Jones, Dr. Who and St. Mary Co. Ltd. met Gen. Lee, Lt. Dan and Capt. Kirk.",
        "mr smith (no dot), Hamr. (no boundary), ſt. (long s), DRS. ESQ. Col. Ft. Maj. Hon. Rev. Sgt. Jr.",
        "In 12.5 seconds, 50 soldiers ran the 1st, 2nd, 3rd and 4th laps.",
        "That will be $20, £3.50, 20€, 20.15€, €7, $1,000,000.99 and 1.5$ please.",
        "That's 100,000.5 and 1,234,567 and 12,34 and 1234,567 and 0.05 and 3.0 and 007.",
        "Odd ordinals: 21th 11st 102nd 1000000th 0th 13rd 5the 4thousand.",
        "Big: 1000100 999999 1000000000000 123456789012345678901234567890.",
        "Floats: 0.1 0.3 1.1 2.675 1.005 9.995 0.00001 123456.789 3.14159265358979323846.",
        "Money edge: $0.005 $0.015 $1.2.3 4€ £1 $1 €1 $01 $.5 $5. £,5 5,£ 1,5$",
        "Temperatures of 20° and 100%% plus #1 & @2.",
        "Unicode digits ٣,٤٥٦ and ١,٢٣٤.٥ and ²³ fractions ½.",
        "Year 2024, phone 555-1234, time 10:30, ratio 3/4, version 1.2.3.4.",
        "x" * 30 + " long " + "The quick brown fox jumps over the lazy dog. " * 7,
    ],
    "es": [
        "La Sra. García y el Sr. Pérez, Dra. Ruiz, Dr. Sol, St. Tomás, Co. Ltd. Jr.",
        "¿Dónde está el niño? ¡Allí! Tom & Jerry @ casa 50 % # $ £ °",
    ],
    "fr": [
        "Mme. Moreau et Mr. Dupond, Dr. Martin, St. Louis, Co. Ltd. Jr. « guillemets »",
        "L'œuvre où l'été dîne à Noël, ça coûte très cher & @ % # $ £ °",
        "En 12,5 secondes, 50 soldats; un 1er test, la 2e, la 3ème, la 1re, 4º, 5ª, 6ère.",
        "Cela fera $20, 20€, 20,15€, €7, £3,50, 1.000.000,99 € et 1,5$, $1.2.3 puis 4€.",
        "Ce sera 100.000,5 et 1.234.567 et 12.34 et 0,05 et 3,0 et 007 et 1 234 et 1a234.",
        "21 31 41 51 61 70 71 72 77 80 81 88 90 91 99 100 101 111 180 181 200 201 280 300 1000 1001",
        "1080 2000 21000 80000 81000 100000 200000 280000 1000000 1000001 2000000 80000000 200000000",
        "1000000000 2000000000 1000000000000 21000000000000000000 123456789012345678901234567890",
        "Ordinaux: 5e 9e 10e 11e 21e 71e 80e 81e 100e 1000e 1000000e, montants: 21€ 1€ 1,01€ 0,5€",
    ],
    "de": [
        "Frau Dr. Müller, Fr. Schmidt, St. Pauli, Co. Jr. Straße, Größe, Ärger über Öl",
        "Grüße & @ % # $ £ ° aus Köln",
        "In 12,5 Sekunden, 50 Soldaten; der 1. Test, am 3. Mai, 4.x, 5.\tTab, 1st 2nd 3rd 4th 5º 6ª und 7.",
        "Das macht $20, 20€, 20,15€, €7, £3,50, 1,01€, 21€, 1.000.000,99 € und 1,5$, $1.2.3 dann 4€.",
        "0 1 11 16 17 21 30 31 41 57 70 99 100 101 121 200 1000 1001 2021 10000 100000 999999 1000000",
        "1000001 1100000 2000000 21000000 201000000 1000000000 1001000000 2000000000 10000000000000",
        "Ordnungen: 1. 3. 7. 8. 20. 21. 100. 101. 1000. 1000000. 2000000. 201000000. 1001000000. 1000001.",
        "Zahlen 100.000,5 und 1.234.567 und 12.34 und 0,05 und 3,0 und 007 und 123456789012345678901234567890",
    ],
    "it": ["Buongiorno, Sig. Rossi, Dr. Verdi, St. Marco, Co. Ltd. Jr. perché è così & @ % # $ £ °"],
    "pt": ["Olá Sr. Silva, Sra. Costa, Dr. Sousa, Dra. Lima, St. Antão, Co. Ltd. Jr. coração ação & @ % # $ £ °"],
    "pl": ["Dzień dobry, P. Kowalski, M. Nowak, Dr. Zając, Sw. Jan, Jr. źdźbło łódź & @ % # $ £ °"],
    "tr": [
        "Merhaba B. Yılmaz, Byk. Dr. Ayşe. İSTANBUL ÖĞLE ÜZÜM ılık ışık & @ % # $ £ °",
        "İi Iı ŞşĞğ",
    ],
    "ru": [
        "Здравствуйте Г-н Иванов, Г-жа Петрова и Д-р Смирнов, д-ра и г-нн & @ % # $ £ °",
        "Ёлка, ЪЬ, объявление, щука",
    ],
    "nl": ["Dhr. Jansen, Mevr. de Vries, Dr. Bakker, Jhr. Six, ĳs & @ % # $ £ °"],
    "cs": ["P. Novák, Dr. Vojtěch, Ing. Dvořák, ıng. příliš žluťoučký kůň úpěl ďábelské ódy & @ % # $ £ °"],
    "ar": ["مرحبا بالعالم، كيف حالك؟ & @ % # $ £ °", "الكتاب على الطاولة."],
    "hu": ["Dr. Szabó, B. Kovács, Nőv. Anna, árvíztűrő tükörfúrógép & @ % # $ £ °"],
    "hi": ["नमस्ते दुनिया। आप कैसे हैं? & @ % # $ £ °", "मेरे पास बैटरी है।"],
    "zh-cn": ["你好，世界。"],
    "ja": ["こんにちは世界"],
    "ko": [
        "안녕하세요 세계. 물엿, 국어 신라 한국말! 좋아요? 각가 ㄱ 앉아 & @ % # $ £ °",
        "Hangul 한글 and ASCII mixed, 읽다 밝은 닭 값을 없어요.",
    ],
}

# Digits in languages whose numbers are not done: the Rust side refuses them.
NUMBERS_ELSEWHERE = {
    "es": "Había 50 soldados y 12,5 segundos.",
    "it": "Questo è un 1° test a 20€.",
    "nl": "Er waren 50 soldaten.",
    "pt": "Isso custará 20€, o 1º teste.",
    "ru": "Там было 50 солдат.",
    "ar": "كان هناك ٣ كتب.",
    "hi": "50 सैनिक थे।",
    "ko": "50 명의 병사가 있었다.",
}


def random_cases(rng, count, alphabet, pieces):
    cases = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.4:
                parts.append(rng.choice(pieces))
            else:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))))
        cases.append("".join(parts))
    return cases


def main():
    logging.disable(logging.WARNING)
    tokenizer = VoiceBpeTokenizer(str(OUT / "vocab.json"))
    rng = random.Random(20251125)
    english_alphabet = "0123456789.,$£€%&@#° abcxyzMDSTndrth-'\"\t\n\u00a0é²٣İſ"
    english_pieces = ["mr.", "Dr.", "st.", "1st", "2nd", "3rd", "4th", "1,000", "12.5", "$5", "5€", "£1.50",
                      " ", "  ", "\"", "0.05", "1,234.56", "100%", "co.", "Ltd."]
    latin_alphabet = ".,&@#%$£° abcxyzäöüßéèçñıİşğőűřěž-'\"\t\n"
    latin_pieces = ["Dr.", "St.", "Sr.", "Mme.", "P.", "B.", "Dhr.", "Ing.", "Sig.", " ", "  "]
    cases = []

    def add(language, text, refused=None, paths=("encode", "sentence")):
        if refused is None and language not in NUMBER_LANGUAGES and re.search(r"\d", text):
            refused = "numbers"
        # French and German integers past 36 digits are refused on the Rust side (dots are removed first).
        if language in ("fr", "de") and re.search(r"[0-9]{37,}", text.replace(".", "")):
            refused = "long_number"
        for path in paths:
            source = text if path == "encode" else text.strip().lower()
            case = {"language": language, "path": path, "text": text}
            if refused:
                case["refused"] = refused
            try:
                case["cleaned"] = tokenizer.preprocess_text(source, language.split("-")[0])
                case["ids"] = tokenizer.encode(source, language)
            except Exception as error:  # the reference's own failure is part of the golden
                case["error"] = type(error).__name__
                case.pop("cleaned", None)
            cases.append(case)

    for language, texts in PER_LANGUAGE.items():
        refused = "romanisation" if language in ROMANISED else None
        for text in texts + ([] if refused else COMMON):
            add(language, text, refused)
    for language, text in NUMBERS_ELSEWHERE.items():
        add(language, text, "numbers")
    add("en", "9" * 307, None)  # past num2words' largest number: the reference raises
    add("en", "1" * 320 + ".5", None)  # a float past 1e308 is inf: the reference raises
    # Random strings: the reference's encode only (the sentence path adds strip and lower).
    for text in random_cases(rng, 250, english_alphabet, english_pieces):
        add("en", text, paths=("encode",))
    french_alphabet = "0123456789.,$£€%&@#° abcxyzéèçœàERèmeºª-'\"\t\n\u00a0"
    french_pieces = ["1er", "2e", "3ème", "1re", "4º", "1.000", "12,5", "$5", "5€", "£1,50", " ", "  ",
                     "0,05", "1.234,56", "100%", "Mme.", "Dr.", "21", "71", "80", "91", "200"]
    for text in random_cases(rng, 100, french_alphabet, french_pieces):
        add("fr", text, paths=("encode",))
    german_pieces = ["1.", "2. ", "3.", "1st", "1.000", "12,5", "$5", "5€", "£1,50", " ", "  ", "21",
                     "0,05", "1.234,56", "100%", "Dr.", "Fr.", "101", "1000000", "2000000"]
    for text in random_cases(rng, 80, french_alphabet.replace("ºª", "äöüß"), german_pieces):
        add("de", text, paths=("encode",))
    for language in ["de", "fr", "es", "tr", "cs", "pl", "hu", "nl", "it", "pt"]:
        for text in random_cases(rng, 25, latin_alphabet, latin_pieces):
            add(language, text, paths=("encode",))
    for text in random_cases(rng, 25, "абвгджнр-. ГДЖНР&@%", ["г-н", "Г-жа", "д-р", " ", "."]):
        add("ru", text, paths=("encode",))

    syllables = [chr(c) for c in range(0xAC00, 0xD7A4)]
    for text in random_cases(rng, 40, syllables + [" ", ".", "a", "ㄱ"], ["아", "이", "앙", "각가", " "]):
        add("ko", text, paths=("encode",))

    versions = {name: metadata.version(name) for name in ["coqui-tts", "num2words", "tokenizers", "ko-speech-tools"]}
    # One case a line: small, and a diff shows which cases moved.
    lines = ",\n".join(json.dumps(case, ensure_ascii=False) for case in cases)
    # Every character str.lower() changes (one at a time): what the cleaners' lowercasing must do.
    lowered = {
        str(code): chr(code).lower()
        for code in range(0x110000)
        if not 0xD800 <= code < 0xE000 and chr(code).lower() != chr(code)
    }
    text = (
        f'{{"versions": {json.dumps(versions)},\n"python_lower": {json.dumps(lowered, ensure_ascii=False)},\n'
        f'"cases": [\n{lines}\n]}}\n'
    )
    (OUT / "tokenizer_cases.json").write_text(text)
    print(f"wrote {len(cases)} cases to {OUT / 'tokenizer_cases.json'}")


if __name__ == "__main__":
    main()
