//! XTTS-v2's tokenizer against coqui-tts 0.28.0's `VoiceBpeTokenizer` on the generated
//! vocab.json: `tests/goldens/xtts/tokenizer_cases.json`, made by
//! `tools/goldens/xtts/make_tokenizer_goldens.py`. Every case the Rust side supports must give
//! the reference's cleaned text and ids exactly; a case where the reference raises must be
//! refused; numbers outside English and the romanised languages must be refused with the
//! error that names what to do.

use serde_json::Value;
use std::path::{Path, PathBuf};
use voxtral_tts::models::xtts::testkit::vocab::xtts_vocab_json;
use voxtral_tts::models::xtts::text::{python_lower, TextError};
use voxtral_tts::models::xtts::tokenizer::XttsTokenizer;

fn goldens() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/xtts")
}

/// Writes the generator's vocab.json where the goldens script reads it.
#[test]
#[ignore = "writes tests/goldens/xtts/vocab.json for tools/goldens/xtts/make_tokenizer_goldens.py"]
fn write_vocab() {
    std::fs::create_dir_all(goldens()).unwrap();
    std::fs::write(goldens().join("vocab.json"), xtts_vocab_json()).unwrap();
}

#[test]
fn the_goldens_vocab_is_the_generators() {
    let stored = std::fs::read_to_string(goldens().join("vocab.json")).unwrap();
    assert!(
        stored == xtts_vocab_json(),
        "regenerate: cargo test --features testkit --test it write_vocab -- --ignored, then the goldens"
    );
}

fn tokenizer() -> XttsTokenizer {
    XttsTokenizer::from_file(&goldens().join("vocab.json")).unwrap()
}

#[test]
fn vocabulary_has_the_published_special_ids() {
    let tokenizer = tokenizer();
    for (token, id) in [
        ("[STOP]", 0),
        ("[UNK]", 1),
        ("[SPACE]", 2),
        ("[en]", 259),
        ("[START]", 261),
    ] {
        assert_eq!(tokenizer.token_id(token), Some(id), "{token}");
    }
    for language in voxtral_tts::models::xtts::text::Language::ALL {
        assert!(tokenizer.speaks(language), "{}", language.tag());
    }
    assert!(tokenizer.number_of_tokens() > 262);
}

#[test]
fn ids_and_cleaned_text_equal_the_reference() {
    let tokenizer = tokenizer();
    let text = std::fs::read_to_string(goldens().join("tokenizer_cases.json")).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let cases = document["cases"].as_array().unwrap();
    let (mut exact, mut refused, mut failures) = (0, 0, Vec::new());
    for case in cases {
        let language = case["language"].as_str().unwrap();
        let input = case["text"].as_str().unwrap();
        let result = match case["path"].as_str().unwrap() {
            "encode" => tokenizer.encode(input, language),
            _ => tokenizer.encode_sentence(input, language),
        };
        let expected_refusal = case["refused"].as_str();
        let describe = || format!("{language} {:?} {input:?}", case["path"]);
        match (expected_refusal, result) {
            (Some("numbers"), Err(TextError::NumbersNotExpanded { .. }))
            | (Some("romanisation"), Err(TextError::NeedsRomanization { .. }))
            | (Some("long_number"), Err(TextError::NumberNotReadable(_))) => refused += 1,
            (Some(kind), other) => failures.push(format!(
                "{}: expected {kind} refusal, got {other:?}",
                describe()
            )),
            (None, Ok(encoded)) => {
                if case.get("error").is_some() {
                    failures.push(format!(
                        "{}: the reference raises {}, got {encoded:?}",
                        describe(),
                        case["error"]
                    ));
                    continue;
                }
                let ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
                let cleaned = case["cleaned"].as_str().unwrap();
                if encoded.cleaned != cleaned || encoded.ids != ids {
                    failures.push(format!(
                        "{}:\n  cleaned {:?}\n  expected {cleaned:?}\n  ids {:?}\n  expected {ids:?}",
                        describe(),
                        encoded.cleaned,
                        encoded.ids
                    ));
                } else {
                    exact += 1;
                }
            }
            (None, Err(error)) => {
                if case.get("error").is_some() && matches!(error, TextError::NumberNotReadable(_)) {
                    refused += 1;
                } else {
                    failures.push(format!(
                        "{}: refused with {error}, the reference gives {:?}",
                        describe(),
                        case["cleaned"]
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(exact > 700, "only {exact} exact cases");
    eprintln!("{exact} cases exact, {refused} refused as expected");
}

#[test]
fn refusals_name_the_language_and_what_to_do() {
    let tokenizer = tokenizer();
    let numbers = tokenizer.encode("Había 50 soldados.", "es").unwrap_err();
    assert_eq!(numbers.param(), "input");
    let message = numbers.to_string();
    assert!(
        message.contains("es") && message.contains("spell the numbers out"),
        "{message}"
    );
    let romanised = tokenizer.encode("你好", "zh-cn").unwrap_err();
    assert_eq!(romanised.param(), "language");
    assert!(romanised.to_string().contains("pypinyin"), "{romanised}");
    let unknown = tokenizer.encode("hej", "sv").unwrap_err();
    assert!(
        matches!(unknown, TextError::UnknownLanguage(_)),
        "{unknown}"
    );
    let huge = tokenizer.encode(&"9".repeat(400), "en").unwrap_err();
    assert!(matches!(huge, TextError::NumberNotReadable(_)), "{huge}");
}

#[test]
fn lowercase_is_pythons_for_every_character() {
    let text = std::fs::read_to_string(goldens().join("tokenizer_cases.json")).unwrap();
    let document: Value = serde_json::from_str(&text).unwrap();
    let lowered = document["python_lower"].as_object().unwrap();
    let mut differences = Vec::new();
    for c in (0..0x110000).filter_map(char::from_u32) {
        let expected = lowered
            .get(&(c as u32).to_string())
            .map_or(c.to_string(), |v| v.as_str().unwrap().to_string());
        if python_lower(&c.to_string()) != expected {
            differences.push(format!("U+{:04X}", c as u32));
        }
    }
    assert!(
        differences.is_empty(),
        "str.lower() differs on {differences:?}"
    );
}

/// Random text over digits, separators, currency signs, letters of the 17 languages and all
/// of Unicode, in every language: an id list or a `TextError`, never a panic.
#[test]
fn any_text_encodes_or_is_refused() {
    const POOL: &str = "0123456789.,;:$£€%&@#°-' \t\n\u{a0}aAzZéÉİıſßΣσкКاअ가각ㄱ漢ºª";
    let pool: Vec<char> = POOL.chars().collect();
    let tokenizer = tokenizer();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..3000 {
        let length = (next() % 60) as usize;
        let text: String = (0..length)
            .map(|_| match next() % 10 {
                0 => char::from_u32((next() % 0x11_0000) as u32).unwrap_or('?'),
                1 => '9',
                _ => pool[(next() % pool.len() as u64) as usize],
            })
            .collect();
        for language in voxtral_tts::models::xtts::text::Language::ALL {
            let name = if language.code() == "zh" {
                "zh-cn"
            } else {
                language.code()
            };
            if let Ok(encoded) = tokenizer.encode(&text, name) {
                assert_eq!(
                    encoded.ids.first(),
                    tokenizer.token_id(&language.tag()).as_ref(),
                    "{round}"
                );
            }
        }
    }
}
