//! German (`Num2Word_DE` on `Num2Word_EU`): one word below a million ("einundzwanzig",
//! "zweihunderttausend"), capitalised scales from "Million" ("zwei Millionen"), ordinals
//! from the cardinal's ending, "ein Euro" in amounts. Integers up to 36 digits (the
//! reference goes further; longer ones are refused here).

use super::{Currency, NumberWords, SplitCards, Valued};
use crate::models::xtts::text::language::TextError;

pub struct German;

impl NumberWords for German {
    fn cardinal(&self, digits: &str) -> Result<String, TextError> {
        cardinal(digits)
    }

    fn ordinal(&self, digits: &str) -> Result<String, TextError> {
        ordinal(digits)
    }

    fn point(&self) -> &'static str {
        "Komma"
    }

    fn currency_names(&self, currency: Currency) -> [(&'static str, &'static str); 2] {
        match currency {
            Currency::Eur => [("Euro", "Euro"), ("Cent", "Cent")],
            Currency::Gbp => [("Pfund", "Pfund"), ("Penny", "Pence")],
            Currency::Usd => [("Dollar", "Dollar"), ("Cent", "Cent")],
        }
    }

    fn cents_separator(&self) -> &'static str {
        " und"
    }

    fn and_word(&self) -> &'static str {
        " und "
    }

    fn fix_currency(&self, amount: String) -> String {
        amount.replace("eins ", "ein ")
    }
}

const MILLION: u128 = 1_000_000;

/// The largest card at most `n`: the EU scales up to 10^33, then the German mid and low words.
fn largest_card_at_most(n: u128) -> (u128, &'static str) {
    const CARDS: [(u128, &str); 17] = [
        (10u128.pow(33), "Quintilliarde"),
        (10u128.pow(30), "Quintillion"),
        (10u128.pow(27), "Quadrilliarde"),
        (10u128.pow(24), "Quadrillion"),
        (10u128.pow(21), "Trilliarde"),
        (10u128.pow(18), "Trillion"),
        (10u128.pow(15), "Billiarde"),
        (10u128.pow(12), "Billion"),
        (10u128.pow(9), "Milliarde"),
        (10u128.pow(6), "Million"),
        (1000, "tausend"),
        (100, "hundert"),
        (90, "neunzig"),
        (80, "achtzig"),
        (70, "siebzig"),
        (60, "sechzig"),
        (50, "fünfzig"),
    ];
    const LOW: [&str; 21] = [
        "null",
        "eins",
        "zwei",
        "drei",
        "vier",
        "fünf",
        "sechs",
        "sieben",
        "acht",
        "neun",
        "zehn",
        "elf",
        "zwölf",
        "dreizehn",
        "vierzehn",
        "fünfzehn",
        "sechzehn",
        "siebzehn",
        "achtzehn",
        "neunzehn",
        "zwanzig",
    ];
    if let Some(&card) = CARDS.iter().find(|(value, _)| *value <= n) {
        return card;
    }
    match n {
        40.. => (40, "vierzig"),
        30.. => (30, "dreißig"),
        _ => {
            let low = n.min(20);
            (low, LOW[low as usize])
        }
    }
}

/// `Num2Word_DE.merge`.
fn merge((mut left, l): Valued, (mut right, r): Valued) -> Valued {
    if l == 1 {
        if r == 100 || r == 1000 {
            return (format!("ein{right}"), r);
        } else if r < MILLION {
            return (right, r);
        }
        left = "eine".to_string();
    }
    let value = if r > l {
        if r >= MILLION {
            if l > 1 {
                right.push_str(if right.ends_with('e') { "n" } else { "en" });
            }
            left.push(' ');
        }
        l * r
    } else {
        if r < 10 && 10 < l && l < 100 {
            let unit = if r == 1 { "ein".to_string() } else { right };
            right = left;
            left = format!("{unit}und");
        } else if l >= MILLION {
            left.push(' ');
        }
        l + r
    };
    (left + &right, value)
}

/// How `num2words` spells integers in this language.
const CARDS: SplitCards = SplitCards {
    one: "eins",
    largest_card_at_most,
    merge,
};

/// Words for a run of ASCII digits, as `num2words(int(digits))`.
fn cardinal(digits: &str) -> Result<String, TextError> {
    CARDS.cardinal(digits)
}

/// `Num2Word_DE.to_ordinal`: the lowercased cardinal's ending changed, "te" added, "ein"
/// dropped before "hundertste"/"tausendste", and "eine " and the space dropped before a
/// final "...illionste"/"...illiardste".
fn ordinal(digits: &str) -> Result<String, TextError> {
    const ENDINGS: [(&str, &str); 11] = [
        ("eins", "ers"),
        ("drei", "drit"),
        ("acht", "ach"),
        ("sieben", "sieb"),
        ("ig", "igs"),
        ("ert", "erts"),
        ("end", "ends"),
        ("ion", "ions"),
        ("nen", "ns"),
        ("rde", "rds"),
        ("rden", "rds"),
    ];
    let mut word = cardinal(digits)?.to_lowercase();
    if let Some((ending, replacement)) = ENDINGS.iter().find(|(ending, _)| word.ends_with(ending)) {
        word.truncate(word.len() - ending.len());
        word.push_str(replacement);
    }
    word.push_str("te");
    if word == "eintausendste" || word == "einhundertste" {
        word = word.replacen("ein", "", 1);
    }
    let scale_ordinal = |w: &str| {
        w.chars().all(|c| c.is_ascii_lowercase())
            && (w.ends_with("illionste") || w.ends_with("illiardste"))
    };
    if let Some(space) = word.rfind(' ') {
        let last = word[space + 1..].to_string();
        if scale_ordinal(&last) {
            let mut head = &word[..space];
            if let Some(before) = head.strip_suffix("eine") {
                head = before.strip_suffix(' ').unwrap_or(before);
            }
            word = format!("{head}{last}");
        }
    }
    Ok(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cardinals_and_ordinals_as_num2words() {
        let cases = [
            ("0", "null"),
            ("1", "eins"),
            ("21", "einundzwanzig"),
            ("99", "neunundneunzig"),
            ("100", "einhundert"),
            ("101", "einhunderteins"),
            ("1000", "eintausend"),
            ("2021", "zweitausendeinundzwanzig"),
            ("1000000", "eine Million"),
            ("2000000", "zwei Millionen"),
            ("1000000001", "eine Milliarde eins"),
            ("2000000000", "zwei Milliarden"),
        ];
        for (digits, words) in cases {
            assert_eq!(cardinal(digits).unwrap(), words, "{digits}");
        }
        let ordinals = [
            ("1", "erste"),
            ("3", "dritte"),
            ("7", "siebte"),
            ("20", "zwanzigste"),
            ("100", "hundertste"),
            ("1000", "tausendste"),
            ("1000000", "millionste"),
            ("2000000", "zweimillionste"),
            ("201000000", "zweihunderteinsmillionste"),
            ("1000001", "eine million erste"),
            ("1001000000", "eine milliardemillionste"),
        ];
        for (digits, words) in ordinals {
            assert_eq!(ordinal(digits).unwrap(), words, "{digits}");
        }
    }
}
