//! coqui's `multilingual_cleaners` and `preprocess_text` (`TTS/tts/layers/xtts/tokenizer.py`,
//! coqui-tts 0.28.0), step by step: drop `"`, the Turkish capital fixes, Python's `lower()`,
//! numbers ([`super::numbers`]), abbreviations, symbols, whitespace; then Korean is
//! romanised ([`super::hangul`]). The word lists are the
//! reference's, in its order (each replacement runs over the previous one's output).

use super::hangul;
use super::language::{Language, TextError};
use super::numbers;
use super::python_chars::{self, is_boundary, is_space};

/// How an abbreviation ends: all but Russian's need a dot after them (`\b{abbr}\.`);
/// Russian's end at a word boundary (`\b{abbr}\b`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum AbbreviationEnd {
    Dot,
    Boundary,
}

fn abbreviations(language: Language) -> (AbbreviationEnd, &'static [(&'static str, &'static str)]) {
    use AbbreviationEnd::{Boundary, Dot};
    match language {
        Language::En => (
            Dot,
            &[
                ("mrs", "misess"),
                ("mr", "mister"),
                ("dr", "doctor"),
                ("st", "saint"),
                ("co", "company"),
                ("jr", "junior"),
                ("maj", "major"),
                ("gen", "general"),
                ("drs", "doctors"),
                ("rev", "reverend"),
                ("lt", "lieutenant"),
                ("hon", "honorable"),
                ("sgt", "sergeant"),
                ("capt", "captain"),
                ("esq", "esquire"),
                ("ltd", "limited"),
                ("col", "colonel"),
                ("ft", "fort"),
            ],
        ),
        Language::Es => (
            Dot,
            &[
                ("sra", "señora"),
                ("sr", "señor"),
                ("dr", "doctor"),
                ("dra", "doctora"),
                ("st", "santo"),
                ("co", "compañía"),
                ("jr", "junior"),
                ("ltd", "limitada"),
            ],
        ),
        Language::Fr => (
            Dot,
            &[
                ("mme", "madame"),
                ("mr", "monsieur"),
                ("dr", "docteur"),
                ("st", "saint"),
                ("co", "compagnie"),
                ("jr", "junior"),
                ("ltd", "limitée"),
            ],
        ),
        Language::De => (
            Dot,
            &[
                ("fr", "frau"),
                ("dr", "doktor"),
                ("st", "sankt"),
                ("co", "firma"),
                ("jr", "junior"),
            ],
        ),
        Language::Pt => (
            Dot,
            &[
                ("sra", "senhora"),
                ("sr", "senhor"),
                ("dr", "doutor"),
                ("dra", "doutora"),
                ("st", "santo"),
                ("co", "companhia"),
                ("jr", "júnior"),
                ("ltd", "limitada"),
            ],
        ),
        Language::It => (
            Dot,
            &[
                ("sig", "signore"),
                ("dr", "dottore"),
                ("st", "santo"),
                ("co", "compagnia"),
                ("jr", "junior"),
                ("ltd", "limitata"),
            ],
        ),
        Language::Pl => (
            Dot,
            &[
                ("p", "pani"),
                ("m", "pan"),
                ("dr", "doktor"),
                ("sw", "święty"),
                ("jr", "junior"),
            ],
        ),
        Language::Cs => (Dot, &[("dr", "doktor"), ("ing", "inženýr"), ("p", "pan")]),
        Language::Ru => (
            Boundary,
            &[("г-жа", "госпожа"), ("г-н", "господин"), ("д-р", "доктор")],
        ),
        Language::Nl => (
            Dot,
            &[
                ("dhr", "de heer"),
                ("mevr", "mevrouw"),
                ("dr", "dokter"),
                ("jhr", "jonkheer"),
            ],
        ),
        Language::Tr => (Dot, &[("b", "bay"), ("byk", "büyük"), ("dr", "doktor")]),
        Language::Hu => (Dot, &[("dr", "doktor"), ("b", "bácsi"), ("nőv", "nővér")]),
        Language::Ar | Language::Zh | Language::Ko | Language::Hi | Language::Ja => (Dot, &[]),
    }
}

/// The replacements for `&`, `@`, `%`, `#`, `$`, `£`, `°`, in that order.
fn symbols(language: Language) -> [&'static str; 7] {
    match language {
        Language::En => [
            " and ",
            " at ",
            " percent ",
            " hash ",
            " dollar ",
            " pound ",
            " degree ",
        ],
        Language::Es => [
            " y ",
            " arroba ",
            " por ciento ",
            " numeral ",
            " dolar ",
            " libra ",
            " grados ",
        ],
        Language::Fr => [
            " et ",
            " arobase ",
            " pour cent ",
            " dièse ",
            " dollar ",
            " livre ",
            " degrés ",
        ],
        Language::De => [
            " und ",
            " at ",
            " prozent ",
            " raute ",
            " dollar ",
            " pfund ",
            " grad ",
        ],
        Language::Pt => [
            " e ",
            " arroba ",
            " por cento ",
            " cardinal ",
            " dólar ",
            " libra ",
            " graus ",
        ],
        Language::It => [
            " e ",
            " chiocciola ",
            " per cento ",
            " cancelletto ",
            " dollaro ",
            " sterlina ",
            " gradi ",
        ],
        Language::Pl => [
            " i ",
            " małpa ",
            " procent ",
            " krzyżyk ",
            " dolar ",
            " funt ",
            " stopnie ",
        ],
        Language::Ar => [
            " و ",
            " على ",
            " في المئة ",
            " رقم ",
            " دولار ",
            " جنيه ",
            " درجة ",
        ],
        Language::Zh => [
            " 和 ",
            " 在 ",
            " 百分之 ",
            " 号 ",
            " 美元 ",
            " 英镑 ",
            " 度 ",
        ],
        Language::Cs => [
            " a ",
            " na ",
            " procento ",
            " křížek ",
            " dolar ",
            " libra ",
            " stupně ",
        ],
        Language::Ru => [
            " и ",
            " собака ",
            " процентов ",
            " номер ",
            " доллар ",
            " фунт ",
            " градус ",
        ],
        Language::Nl => [
            " en ",
            " bij ",
            " procent ",
            " hekje ",
            " dollar ",
            " pond ",
            " graden ",
        ],
        Language::Tr => [
            " ve ",
            " at ",
            " yüzde ",
            " diyez ",
            " dolar ",
            " sterlin ",
            " derece ",
        ],
        Language::Hu => [
            " és ",
            " kukac ",
            " százalék ",
            " kettőskereszt ",
            " dollár ",
            " font ",
            " fok ",
        ],
        Language::Ko => [
            " 그리고 ",
            " 에 ",
            " 퍼센트 ",
            " 번호 ",
            " 달러 ",
            " 파운드 ",
            " 도 ",
        ],
        Language::Hi => [
            " और ",
            " ऐट दी रेट ",
            " प्रतिशत ",
            " हैश ",
            " डॉलर ",
            " पाउंड ",
            " डिग्री ",
        ],
        // The reference has no symbol table for Japanese (its cleaner never reaches it).
        Language::Ja => unreachable!("Japanese does not go through multilingual_cleaners"),
    }
}

const SYMBOLS: [char; 7] = ['&', '@', '%', '#', '$', '£', '°'];

/// `preprocess_text`: the cleaned text the tokenizer encodes after the language tag.
pub fn preprocess(text: &str, language: Language) -> Result<String, TextError> {
    let needs = match language {
        Language::Zh => "Chinese number normalisation and pypinyin transliteration",
        Language::Ja => "cutlet romanisation (MeCab)",
        Language::Ko => return Ok(hangul::romanize(&multilingual_cleaners(text, language)?)),
        _ => return multilingual_cleaners(text, language),
    };
    Err(TextError::NeedsRomanization { language, needs })
}

/// `multilingual_cleaners` for a language whose every step is done here.
fn multilingual_cleaners(text: &str, language: Language) -> Result<String, TextError> {
    let mut text = text.replace('"', "");
    if language == Language::Tr {
        text = text.replace('İ', "i").replace('Ö', "ö").replace('Ü', "ü");
    }
    let text = python_chars::lower(&text);
    let text = numbers::expand(&text, language)?;
    let text = expand_abbreviations(&text, language);
    let text = expand_symbols(&text, language);
    Ok(python_chars::collapse_whitespace(&text))
}

/// Whether `c` matches the abbreviation's (lowercase) letter `p` under Python's IGNORECASE:
/// the simple lowercase, and the few extra equivalences `re` knows (ı and İ for i, ſ for s,
/// the Kelvin sign for k, the rounded Cyrillic de for д).
fn ignorecase_eq(c: char, p: char) -> bool {
    if c == p || matches!((p, c), ('i', 'İ' | 'ı') | ('s', 'ſ') | ('д', '\u{1C81}')) {
        return true;
    }
    let mut lower = c.to_lowercase();
    lower.next() == Some(p) && lower.next().is_none()
}

/// Length in chars of `abbreviation` (and its end) matched at `chars[at..]`, if it matches.
fn abbreviation_at(
    chars: &[char],
    at: usize,
    abbreviation: &[char],
    end: AbbreviationEnd,
) -> Option<usize> {
    let before = at.checked_sub(1).map(|i| chars[i]);
    if !is_boundary(before, chars.get(at).copied()) {
        return None;
    }
    let body = chars.get(at..at + abbreviation.len())?;
    if !body
        .iter()
        .zip(abbreviation)
        .all(|(&c, &p)| ignorecase_eq(c, p))
    {
        return None;
    }
    let after = at + abbreviation.len();
    match end {
        AbbreviationEnd::Dot => (chars.get(after) == Some(&'.')).then_some(abbreviation.len() + 1),
        AbbreviationEnd::Boundary => {
            is_boundary(chars.get(after - 1).copied(), chars.get(after).copied())
                .then_some(abbreviation.len())
        }
    }
}

/// `expand_abbreviations_multilingual`: each abbreviation in turn, `re.sub` over the text.
fn expand_abbreviations(text: &str, language: Language) -> String {
    let (end, table) = abbreviations(language);
    let mut text = text.to_string();
    for (abbreviation, replacement) in table {
        let abbreviation: Vec<char> = abbreviation.chars().collect();
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        while at < chars.len() {
            match abbreviation_at(&chars, at, &abbreviation, end) {
                Some(length) => {
                    out.push_str(replacement);
                    at += length;
                }
                None => {
                    out.push(chars[at]);
                    at += 1;
                }
            }
        }
        text = out;
    }
    text
}

/// `expand_symbols_multilingual`: each symbol replaced by its word with spaces around, one
/// pass of `"  "` to `" "` after each, then `strip()`.
fn expand_symbols(text: &str, language: Language) -> String {
    let mut text = text.to_string();
    for (symbol, word) in SYMBOLS.into_iter().zip(symbols(language)) {
        text = text.replace(symbol, word).replace("  ", " ");
    }
    text.trim_matches(is_space).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(text: &str, language: &str) -> String {
        preprocess(text, Language::parse(language).unwrap()).unwrap()
    }

    #[test]
    fn abbreviations_need_a_boundary_before_and_a_dot_after() {
        assert_eq!(
            clean("Hello Mr. Smith and Mrs. X, Dr.No", "en"),
            "hello mister smith and misess x, doctorno"
        );
        assert_eq!(clean("mr smith, hamr. st.", "en"), "mr smith, hamr. saint");
        assert_eq!(clean("ſt. ıng.", "cs"), "ſt. inženýr");
        assert_eq!(
            clean("Здравствуйте Г-н Иванов, д-ра", "ru"),
            "здравствуйте господин иванов, д-ра"
        );
        assert_eq!(clean("Dhr. Jansen", "nl"), "de heer jansen");
    }

    #[test]
    fn symbols_and_whitespace() {
        assert_eq!(
            clean("Tom & Jerry @ home #1", "en").len(),
            "tom and jerry at home hash one".len()
        );
        assert_eq!(clean("  a&&b  \t c ", "fr"), "a et et b c");
        assert_eq!(clean("\"Quoted\"  text", "de"), "quoted text");
    }

    #[test]
    fn turkish_capitals_korean_and_the_refused_languages() {
        assert_eq!(clean("İSTANBUL ÖĞLE ÜZÜM", "tr"), "istanbul öğle üzüm");
        assert_eq!(
            clean("안녕하세요 & 물엿", "ko"),
            "annyeonghase-yo geuligo mul-yeos"
        );
        for language in ["zh-cn", "ja"] {
            let error = preprocess("text", Language::parse(language).unwrap()).unwrap_err();
            assert!(
                matches!(error, TextError::NeedsRomanization { .. }),
                "{error}"
            );
            assert_eq!(error.param(), "language");
        }
    }
}
