//! French (`Num2Word_FR` on `Num2Word_EU`): `splitnum` over the French cards (no 70 or 90: "soixante-dix",
//! "quatre-vingt-dix") and `Num2Word_FR.merge` (the "et" of 21, 31, ... 71, the plural "s"
//! of "quatre-vingts" and "cents" only at the end). Integers up to 36 digits (the reference
//! goes further; longer ones are refused here).

use super::{Currency, NumberWords, SplitCards, Valued};
use crate::models::xtts::text::language::TextError;

pub struct French;

impl NumberWords for French {
    fn cardinal(&self, digits: &str) -> Result<String, TextError> {
        cardinal(digits)
    }

    fn ordinal(&self, digits: &str) -> Result<String, TextError> {
        ordinal(digits)
    }

    fn point(&self) -> &'static str {
        "virgule"
    }

    fn currency_names(&self, currency: Currency) -> [(&'static str, &'static str); 2] {
        match currency {
            Currency::Eur => [("euro", "euros"), ("centime", "centimes")],
            Currency::Usd => [("dollar", "dollars"), ("cent", "cents")],
            Currency::Gbp => [("livre", "livres"), ("penny", "pence")],
        }
    }

    fn cents_separator(&self) -> &'static str {
        " et"
    }

    fn and_word(&self) -> &'static str {
        " et "
    }
}

/// The cards `splitnum` picks from, largest first: the EU scales up to 10^33, then the
/// French mid and low words.
fn largest_card_at_most(n: u128) -> (u128, &'static str) {
    const SCALES: [(u32, &str); 10] = [
        (33, "quintilliard"),
        (30, "quintillion"),
        (27, "quadrilliard"),
        (24, "quadrillion"),
        (21, "trilliard"),
        (18, "trillion"),
        (15, "billiard"),
        (12, "billion"),
        (9, "milliard"),
        (6, "million"),
    ];
    const MID: [(u128, &str); 7] = [
        (1000, "mille"),
        (100, "cent"),
        (80, "quatre-vingts"),
        (60, "soixante"),
        (50, "cinquante"),
        (40, "quarante"),
        (30, "trente"),
    ];
    const LOW: [&str; 21] = [
        "zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix",
        "onze", "douze", "treize", "quatorze", "quinze", "seize", "dix-sept", "dix-huit",
        "dix-neuf", "vingt",
    ];
    for (exponent, word) in SCALES {
        let value = 10u128.pow(exponent);
        if value <= n {
            return (value, word);
        }
    }
    for (value, word) in MID {
        if value <= n {
            return (value, word);
        }
    }
    // No card between 20 and 30: 21..29 are "vingt" and a remainder.
    let low = n.min(20);
    (low, LOW[low as usize])
}

/// `Num2Word_FR.merge`.
fn merge((mut left, l): Valued, (mut right, r): Valued) -> Valued {
    if l == 1 {
        if r < 1_000_000 {
            return (right, r);
        }
    } else {
        if (l % 100 == 80 || (l % 100 == 0 && l < 1000)) && r < 1_000_000 && left.ends_with('s') {
            left.pop();
        }
        if l < 1000 && r != 1000 && !right.ends_with('s') && r % 100 == 0 {
            right.push('s');
        }
    }
    if r < l && l < 100 {
        let joiner = if r % 10 == 1 && l != 80 { " et " } else { "-" };
        return (format!("{left}{joiner}{right}"), l + r);
    }
    if r > l {
        (format!("{left} {right}"), l * r)
    } else {
        (format!("{left} {right}"), l + r)
    }
}

/// How `num2words` spells integers in this language.
const CARDS: SplitCards = SplitCards {
    one: "un",
    largest_card_at_most,
    merge,
};

/// Words for a run of ASCII digits, as `num2words(int(digits))`.
fn cardinal(digits: &str) -> Result<String, TextError> {
    CARDS.cardinal(digits)
}

/// `num2words(int(digits), ordinal=True, lang="fr")`.
fn ordinal(digits: &str) -> Result<String, TextError> {
    let words = cardinal(digits)?;
    if words == "un" && digits.trim_start_matches('0') == "1" {
        return Ok("premier".to_string());
    }
    for (ending, replacement) in [("cinq", "cinquième"), ("neuf", "neuvième")] {
        if let Some(stem) = words.strip_suffix(ending) {
            return Ok(format!("{stem}{replacement}"));
        }
    }
    let stem = words.strip_suffix('e').unwrap_or(&words);
    Ok(format!("{stem}ième"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cardinals_and_ordinals_as_num2words() {
        let cases = [
            ("0", "zéro"),
            ("1", "un"),
            ("21", "vingt et un"),
            ("71", "soixante et onze"),
            ("75", "soixante-quinze"),
            ("80", "quatre-vingts"),
            ("81", "quatre-vingt-un"),
            ("91", "quatre-vingt-onze"),
            ("200", "deux cents"),
            ("201", "deux cent un"),
            ("1000", "mille"),
            ("2000", "deux mille"),
            ("80000", "quatre-vingt mille"),
            ("1000000", "un million"),
            ("2000000", "deux millions"),
        ];
        for (digits, words) in cases {
            assert_eq!(cardinal(digits).unwrap(), words, "{digits}");
        }
        assert_eq!(ordinal("1").unwrap(), "premier");
        assert_eq!(ordinal("5").unwrap(), "cinquième");
        assert_eq!(ordinal("4").unwrap(), "quatrième");
        assert_eq!(ordinal("21").unwrap(), "vingt et unième");
    }
}
