//! English (`Num2Word_EN` on `Num2Word_EU`): "one thousand, two hundred and five", scales
//! from "million" to "centillion" (10^303), integers up to 306 digits (`MAXVAL`).

use super::{unreadable, Currency, NumberWords};
use crate::models::xtts::text::language::TextError;

pub struct English;

impl NumberWords for English {
    fn cardinal(&self, digits: &str) -> Result<String, TextError> {
        cardinal(digits)
    }

    fn ordinal(&self, digits: &str) -> Result<String, TextError> {
        ordinal(digits)
    }

    fn point(&self) -> &'static str {
        "point"
    }

    fn currency_names(&self, currency: Currency) -> [(&'static str, &'static str); 2] {
        match currency {
            Currency::Gbp => [("pound sterling", "pounds sterling"), ("penny", "pence")],
            Currency::Usd => [("dollar", "dollars"), ("cent", "cents")],
            Currency::Eur => [("euro", "euro"), ("cent", "cents")],
        }
    }

    fn cents_separator(&self) -> &'static str {
        ","
    }

    fn and_word(&self) -> &'static str {
        ", "
    }
}

const SMALL: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 8] = [
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// Python's `int(str)` refuses more digits than this (`sys.int_info.str_digits_check_threshold`).
const PYTHON_INT_DIGITS: usize = 4300;
/// Numbers below 10^306 have words (`MAXVAL` = 1000 × the largest scale, 10^303).
const MAX_DIGITS: usize = 306;

/// The word for 10^(3k), k >= 2: `Num2Word_EU.gen_high_numwords` + "illion", counted down
/// from "cent" (10^303) to "m" (10^6).
fn scale_word(k: usize) -> String {
    const LOWS: [&str; 9] = [
        "non", "oct", "sept", "sext", "quint", "quadr", "tr", "b", "m",
    ];
    const UNITS: [&str; 10] = [
        "", "un", "duo", "tre", "quattuor", "quin", "sex", "sept", "octo", "novem",
    ];
    const TENS_PREFIXES: [&str; 9] = [
        "dec",
        "vigint",
        "trigint",
        "quadragint",
        "quinquagint",
        "sexagint",
        "septuagint",
        "octogint",
        "nonagint",
    ];
    // Counted up from million (k = 2): the lows backwards, then unit+tens, then "cent".
    let up = k - 2;
    let stem = if up < LOWS.len() {
        LOWS[LOWS.len() - 1 - up].to_string()
    } else if up < LOWS.len() + 90 {
        let combined = up - LOWS.len();
        format!("{}{}", UNITS[combined % 10], TENS_PREFIXES[combined / 10])
    } else {
        "cent".to_string()
    };
    stem + "illion"
}

/// Words for a run of ASCII digits, as `num2words(int(digits))`.
fn cardinal(digits: &str) -> Result<String, TextError> {
    let significant = digits.trim_start_matches('0');
    if digits.len() > PYTHON_INT_DIGITS || significant.len() > MAX_DIGITS {
        return Err(unreadable(digits));
    }
    Ok(cardinal_of(if significant.is_empty() {
        "0"
    } else {
        significant
    }))
}

/// `cardinal` of digits without leading zeros: `splitnum` and `merge` folded into their
/// cases (a scale after its multiplier, "and" before a remainder under 100, ", " otherwise).
fn cardinal_of(digits: &str) -> String {
    if digits.len() <= 2 {
        let n: usize = digits.parse().unwrap();
        return match n {
            0..20 => SMALL[n].to_string(),
            _ if n.is_multiple_of(10) => TENS[n / 10 - 2].to_string(),
            _ => format!("{}-{}", TENS[n / 10 - 2], SMALL[n % 10]),
        };
    }
    let (head, rest, scale) = if digits.len() == 3 {
        (&digits[..1], &digits[1..], "hundred".to_string())
    } else {
        let k = (digits.len() - 1) / 3;
        let split = digits.len() - 3 * k;
        let scale = if k == 1 {
            "thousand".to_string()
        } else {
            scale_word(k)
        };
        (&digits[..split], &digits[split..], scale)
    };
    let head = format!("{} {scale}", cardinal_of(head));
    let rest = rest.trim_start_matches('0');
    match rest.len() {
        0 => head,
        1 | 2 => format!("{head} and {}", cardinal_of(rest)),
        _ => format!("{head}, {}", cardinal_of(rest)),
    }
}

/// `num2words(int(digits), ordinal=True)`: the last word of the cardinal made ordinal.
fn ordinal(digits: &str) -> Result<String, TextError> {
    let words = cardinal(digits)?;
    let (before, last) = match words.rfind([' ', '-']) {
        Some(at) => words.split_at(at + 1),
        None => ("", words.as_str()),
    };
    let last = match last {
        "one" => "first".to_string(),
        "two" => "second".to_string(),
        "three" => "third".to_string(),
        "five" => "fifth".to_string(),
        "eight" => "eighth".to_string(),
        "nine" => "ninth".to_string(),
        "twelve" => "twelfth".to_string(),
        other => match other.strip_suffix('y') {
            Some(stem) => format!("{stem}ieth"),
            None => format!("{other}th"),
        },
    };
    Ok(format!("{before}{last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cardinals_and_ordinals_as_num2words() {
        let cases = [
            ("0", "zero"),
            ("007", "seven"),
            ("15", "fifteen"),
            ("42", "forty-two"),
            ("100", "one hundred"),
            ("105", "one hundred and five"),
            ("1200", "one thousand, two hundred"),
            ("2005", "two thousand and five"),
            ("1000100", "one million, one hundred"),
            (
                "999999",
                "nine hundred and ninety-nine thousand, nine hundred and ninety-nine",
            ),
            ("1000000000", "one billion"),
        ];
        for (digits, words) in cases {
            assert_eq!(cardinal(digits).unwrap(), words, "{digits}");
        }
        assert_eq!(scale_word(101), "centillion");
        assert_eq!(scale_word(12), "undecillion");
        assert_eq!(scale_word(11), "decillion");
        assert!(cardinal(&"9".repeat(306)).is_ok());
        assert!(cardinal(&"1".repeat(307)).is_err());
        assert_eq!(ordinal("1").unwrap(), "first");
        assert_eq!(ordinal("22").unwrap(), "twenty-second");
        assert_eq!(ordinal("40").unwrap(), "fortieth");
        assert_eq!(ordinal("1200").unwrap(), "one thousand, two hundredth");
    }
}
