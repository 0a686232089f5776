//! coqui's `expand_numbers_multilingual`, done for English, French and German: the other
//! languages' number words come from `num2words` modules not reproduced here, so their text is refused
//! as soon as it holds a digit (anything Python's `\d` matches, the only way that step
//! changes text).
//!
//! In the reference's order, each a `re.sub` over the previous one's output:
//! 1. English: commas out of `\b\d{1,3}(,\d{3})*(\.\d+)?\b` ("1,234.5" to "1234.5");
//!    French and German: dots out of `\b\d{1,3}(.\d{3})*(\,\d+)?\b`, whose unescaped `.` is any
//!    character ("1.234,5" to "1234,5");
//! 2. £, $ and € amounts, before or after the number, through `num2words(to="currency")`;
//!    an amount the reference fails on (two points, past 28 digits) makes it skip the rest
//!    of the currency step, kept as it does;
//! 3. decimals `[0-9]+[.,][0-9]+` through `num2words(float)`;
//! 4. ordinals: a digit run then the language's first matching suffix (English `st nd rd
//!    th`, French `º ª er re e ème`, German `st nd rd th º ª` or a dot before a space or the
//!    end), not checked against the number;
//! 5. the remaining digit runs as cardinals.

use super::language::{Language, TextError};
use super::num2words::{self, currency_words, float_words, Currency, NumberWords};
use super::python_chars::{is_boundary, is_decimal, is_space};
use num2words::de::German;
use num2words::en::English;
use num2words::fr::French;

/// The text with its numbers in words, or the error the reference would raise (a number
/// too long for Python's `int`, past `num2words`' largest) or a language not done here.
pub fn expand(text: &str, language: Language) -> Result<String, TextError> {
    match language {
        Language::En => return expand_with(text, &English, &ENGLISH_ORDINALS, Separators::English),
        Language::Fr => return expand_with(text, &French, &FRENCH_ORDINALS, Separators::European),
        Language::De => return expand_with(text, &German, &GERMAN_ORDINALS, Separators::European),
        _ => {}
    }
    match text.find(is_decimal) {
        None => Ok(text.to_string()),
        Some(at) => Err(TextError::NumbersNotExpanded {
            language,
            found: text[at..]
                .chars()
                .take_while(|&c| is_decimal(c) || c == '.' || c == ',')
                .collect(),
        }),
    }
}

const ENGLISH_ORDINALS: [&str; 4] = ["st", "nd", "rd", "th"];
const FRENCH_ORDINALS: [&str; 6] = ["º", "ª", "er", "re", "e", "ème"];
/// German's last suffix is a dot followed by whitespace or the end (`\.(?=\s|$)`).
const GERMAN_ORDINALS: [&str; 7] = ["st", "nd", "rd", "th", "º", "ª", "."];

/// Which thousands separators step 1 removes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Separators {
    /// Commas, with a point before the decimals (English and Russian).
    English,
    /// Dots (any character as the separator), with a comma before the decimals.
    European,
}

fn expand_with(
    text: &str,
    words: &dyn NumberWords,
    ordinal_suffixes: &[&str],
    separators: Separators,
) -> Result<String, TextError> {
    let mut text = remove_separators(&chars(text), separators);
    for (symbol, currency) in [
        ('£', Currency::Gbp),
        ('$', Currency::Usd),
        ('€', Currency::Eur),
    ] {
        match expand_currency(&chars(&text), symbol, currency, words) {
            Some(expanded) => text = expanded,
            None => break,
        }
    }
    let text = expand_decimals(&chars(&text), words)?;
    let text = expand_ordinals(&chars(&text), words, ordinal_suffixes)?;
    expand_cardinals(&chars(&text), words)
}

fn chars(text: &str) -> Vec<char> {
    text.chars().collect()
}

/// Length of the run of `class` characters starting at `at`.
fn run(chars: &[char], at: usize, class: impl Fn(char) -> bool) -> usize {
    chars[at.min(chars.len())..]
        .iter()
        .take_while(|&&c| class(c))
        .count()
}

/// End of a `\b\d{1,3}(,\d{3})*(\.\d+)?\b` match (English) or `\b\d{1,3}(.\d{3})*(\,\d+)?\b`
/// (European) starting at `at`, trying the choices in the order Python's backtracking does.
fn thousands_match(chars: &[char], at: usize, separators: Separators) -> Option<usize> {
    let (is_separator, decimal_mark): (fn(char) -> bool, char) = match separators {
        Separators::English => (|c| c == ',', '.'),
        Separators::European => (|c| c != '\n', ','),
    };
    let before = at.checked_sub(1).map(|i| chars[i]);
    if !is_boundary(before, chars.get(at).copied()) {
        return None;
    }
    let ends_at_boundary = |end: usize| is_boundary(Some(chars[end - 1]), chars.get(end).copied());
    let lead = run(chars, at, is_decimal).min(3);
    for lead in (1..=lead).rev() {
        // The greedy `(,\d{3})*` ends, longest first.
        let mut group_ends = vec![at + lead];
        loop {
            let end = *group_ends.last().unwrap();
            if chars.get(end).is_some_and(|&c| is_separator(c))
                && run(chars, end + 1, is_decimal) >= 3
            {
                group_ends.push(end + 4);
            } else {
                break;
            }
        }
        for &end in group_ends.iter().rev() {
            if chars.get(end) == Some(&decimal_mark) {
                let digits = run(chars, end + 1, is_decimal);
                for length in (1..=digits).rev() {
                    if ends_at_boundary(end + 1 + length) {
                        return Some(end + 1 + length);
                    }
                }
            }
            if ends_at_boundary(end) {
                return Some(end);
            }
        }
    }
    None
}

/// `re.sub(_comma_number_re, _remove_commas, text)` (English) or
/// `re.sub(_dot_number_re, _remove_dots, text)` (European).
fn remove_separators(chars: &[char], separators: Separators) -> String {
    let removed = match separators {
        Separators::English => ',',
        Separators::European => '.',
    };
    let mut out = String::with_capacity(chars.len());
    let mut at = 0;
    while at < chars.len() {
        match thousands_match(chars, at, separators) {
            Some(end) => {
                out.extend(chars[at..end].iter().filter(|&&c| c != removed));
                at = end;
            }
            None => {
                out.push(chars[at]);
                at += 1;
            }
        }
    }
    out
}

fn is_amount_char(c: char) -> bool {
    c.is_ascii_digit() || c == '.' || c == ','
}

/// End of a currency match at `at`: the symbol then `[0-9.,]*[0-9]+` (up to the run's last
/// digit), or `[0-9.,]*[0-9]+` then the symbol.
fn currency_match(chars: &[char], at: usize, symbol: char) -> Option<usize> {
    if chars[at] == symbol {
        let length = run(chars, at + 1, is_amount_char);
        let last_digit = chars[at + 1..at + 1 + length]
            .iter()
            .rposition(char::is_ascii_digit)?;
        return Some(at + 1 + last_digit + 1);
    }
    let end = at + run(chars, at, is_amount_char);
    (end > at && chars[end - 1].is_ascii_digit() && chars.get(end) == Some(&symbol))
        .then_some(end + 1)
}

/// One currency's `re.sub`, or None where the reference's raises (its text is then dropped,
/// with every later currency).
fn expand_currency(
    chars: &[char],
    symbol: char,
    currency: Currency,
    words: &dyn NumberWords,
) -> Option<String> {
    let mut out = String::with_capacity(chars.len());
    let mut at = 0;
    while at < chars.len() {
        match currency_match(chars, at, symbol) {
            Some(end) => {
                let amount: String = chars[at..end]
                    .iter()
                    .filter(|&&c| c != symbol)
                    .map(|&c| if c == ',' { '.' } else { c })
                    .collect();
                let amount = num2words::parse_float(&amount)?;
                out.push_str(&currency_words(words, amount, currency)?);
                at = end;
            }
            None => {
                out.push(chars[at]);
                at += 1;
            }
        }
    }
    Some(out)
}

/// `re.sub(r"([0-9]+[.,][0-9]+)", ...)`: a digit run, one point or comma, a digit run.
fn expand_decimals(chars: &[char], words: &dyn NumberWords) -> Result<String, TextError> {
    let mut out = String::with_capacity(chars.len());
    let mut at = 0;
    while at < chars.len() {
        let whole = run(chars, at, |c| c.is_ascii_digit());
        let separator = at + whole;
        let fraction = run(chars, separator + 1, |c| c.is_ascii_digit());
        if whole > 0 && matches!(chars.get(separator), Some('.' | ',')) && fraction > 0 {
            let end = separator + 1 + fraction;
            let source: String = chars[at..end].iter().collect();
            let value = num2words::parse_float(&source.replace(',', "."))
                .ok_or_else(|| num2words::unreadable(&source))?;
            out.push_str(&float_words(words, value, &source)?);
            at = end;
        } else {
            // Inside a digit run the match would end at the same place: skip the run.
            let skip = whole.max(1);
            out.extend(&chars[at..at + skip]);
            at += skip;
        }
    }
    Ok(out)
}

/// `re.sub(r"([0-9]+)(st|nd|rd|th)", ...)` and its French form: the first suffix, in the
/// pattern's order, that follows the whole digit run.
fn expand_ordinals(
    chars: &[char],
    words: &dyn NumberWords,
    suffixes: &[&str],
) -> Result<String, TextError> {
    let mut out = String::with_capacity(chars.len());
    let mut at = 0;
    while at < chars.len() {
        let digits = run(chars, at, |c| c.is_ascii_digit());
        let after: String = chars[(at + digits).min(chars.len())..]
            .iter()
            .take(3)
            .collect();
        let dot_ends_a_word = after.chars().nth(1).is_none_or(is_space);
        let suffix = suffixes
            .iter()
            .find(|&&suffix| after.starts_with(suffix) && (suffix != "." || dot_ends_a_word));
        if let (true, Some(suffix)) = (digits > 0, suffix) {
            let number: String = chars[at..at + digits].iter().collect();
            out.push_str(&words.ordinal(&number)?);
            at += digits + suffix.chars().count();
        } else {
            let skip = digits.max(1);
            out.extend(&chars[at..at + skip]);
            at += skip;
        }
    }
    Ok(out)
}

/// `re.sub(r"[0-9]+", ...)`.
fn expand_cardinals(chars: &[char], words: &dyn NumberWords) -> Result<String, TextError> {
    let mut out = String::with_capacity(chars.len());
    let mut at = 0;
    while at < chars.len() {
        let digits = run(chars, at, |c| c.is_ascii_digit());
        if digits > 0 {
            let number: String = chars[at..at + digits].iter().collect();
            out.push_str(&words.cardinal(&number)?);
            at += digits;
        } else {
            out.push(chars[at]);
            at += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn english(text: &str) -> String {
        expand(text, Language::En).unwrap()
    }

    #[test]
    fn the_reference_own_english_cases() {
        assert_eq!(english("in 12.5 seconds."), "in twelve point five seconds.");
        assert_eq!(
            english("there were 50 soldiers."),
            "there were fifty soldiers."
        );
        assert_eq!(english("this is a 1st test"), "this is a first test");
        assert_eq!(
            english("that will be $20 sir."),
            "that will be twenty dollars sir."
        );
        assert_eq!(
            english("that will be 20€ sir."),
            "that will be twenty euro sir."
        );
        assert_eq!(
            english("that will be 20.15€ sir."),
            "that will be twenty euro, fifteen cents sir."
        );
        assert_eq!(
            english("that's 100,000.5."),
            "that's one hundred thousand point five."
        );
    }

    #[test]
    fn commas_only_in_thousands_groups() {
        assert_eq!(
            remove_separators(
                &chars("1,234,567 and 12,34 and 1234,567"),
                Separators::English
            ),
            "1234567 and 12,34 and 1234,567"
        );
        assert_eq!(
            remove_separators(&chars("a1,234 1,234a 1,234.5x"), Separators::English),
            "a1,234 1,234a 1234.5x"
        );
    }

    #[test]
    fn the_reference_own_french_cases() {
        let french = |text| expand(text, Language::Fr).unwrap();
        assert_eq!(
            french("en 12,5 secondes."),
            "en douze virgule cinq secondes."
        );
        assert_eq!(french("ceci est un 1er test"), "ceci est un premier test");
        assert_eq!(
            french("cela vous fera $20 monsieur."),
            "cela vous fera vingt dollars monsieur."
        );
        assert_eq!(
            french("cela vous fera 20,15€ monsieur."),
            "cela vous fera vingt euros et quinze centimes monsieur."
        );
        assert_eq!(
            french("ce sera 100.000,5."),
            "ce sera cent mille virgule cinq."
        );
        assert_eq!(
            remove_separators(&chars("1 234 5x678"), Separators::European),
            "1 234 5x678"
        );
    }

    #[test]
    fn the_reference_own_german_cases() {
        let german = |text| expand(text, Language::De).unwrap();
        assert_eq!(german("in 12,5 sekunden."), "in zwölf Komma fünf sekunden.");
        assert_eq!(german("dies ist ein 1. test"), "dies ist ein erste test");
        assert_eq!(
            german("das macht 20,15€ herr."),
            "das macht zwanzig Euro und fünfzehn Cent herr."
        );
        assert_eq!(german("am 3.4. und 5.x"), "am drei Komma vier. und fünf.x");
    }

    #[test]
    fn a_failed_amount_skips_the_rest_of_the_currency_step() {
        // "$1.2.3" is not a float: the reference drops the dollar and euro passes.
        assert_eq!(
            english("£5 $1.2.3 4€"),
            "five pounds sterling $one point two.three four€"
        );
    }

    #[test]
    fn other_languages_refuse_digits() {
        let error = expand("es 1.234,5 euros", Language::Es).unwrap_err();
        assert_eq!(
            error,
            TextError::NumbersNotExpanded {
                language: Language::Es,
                found: "1.234,5".to_string()
            }
        );
        assert!(error.to_string().contains("spell the numbers out"));
        assert!(matches!(
            expand("٣ كتب", Language::Ar),
            Err(TextError::NumbersNotExpanded { .. })
        ));
        assert_eq!(expand("sin números", Language::Es).unwrap(), "sin números");
    }
}
