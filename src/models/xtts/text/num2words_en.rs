//! English number words as Python's `num2words` 0.5.14 writes them (`Num2Word_EN` on
//! `Num2Word_EU` and `Num2Word_Base`), for the calls coqui's cleaner makes: cardinals of
//! integers and floats, ordinals, and `to="currency"`.
//!
//! The reference's quirks are kept: "one thousand, two hundred and five"; a float's digits
//! after the point come from its shortest repr ("12.50" is 12.5: "twelve point five"); a whole
//! float ("3.0") reads as an integer ("three"); currency rounds half up to cents. Integers go
//! up to 306 digits (the reference's `MAXVAL`), whole floats up to 2^53 (past it the
//! reference does float arithmetic that is not reproduced here, so they are refused).

use super::language::TextError;

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
pub fn cardinal(digits: &str) -> Result<String, TextError> {
    let too_long = || TextError::NumberNotReadable(digits.chars().take(40).collect());
    if digits.len() > PYTHON_INT_DIGITS {
        return Err(too_long());
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > MAX_DIGITS {
        return Err(too_long());
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
pub fn ordinal(digits: &str) -> Result<String, TextError> {
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

/// `x` as `m · 2^e` with an integer `m`.
fn binary_parts(x: f64) -> (u64, i32) {
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7FF) as i32;
    let fraction = bits & ((1 << 52) - 1);
    if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), exponent - 1075)
    }
}

/// `floor(x · 10^places)` for `0 <= x < 1`, exactly (the float's binary value, as
/// Python's `Decimal(float)` sees it).
fn leading_fraction_digits(x: f64, places: u32) -> u64 {
    let (mantissa, exponent) = binary_parts(x);
    let shift = (-exponent) as u32;
    let scaled = mantissa as u128 * 10u128.pow(places);
    if shift >= 128 {
        0
    } else {
        (scaled >> shift) as u64
    }
}

/// The float Python's `float(text)` gives for digits with at most one point, or None where
/// Python raises (no digit, two points) or gets an infinity.
pub fn parse_float(text: &str) -> Option<f64> {
    let value: f64 = text.parse().ok()?;
    value.is_finite().then_some(value)
}

/// Digits after the point in `repr(x)` written as a `Decimal`'s exponent: `abs(exponent)`,
/// what `float2tuple` takes as the precision. `repr` is the shortest round-trip form,
/// positional from 1e-4 to 1e16 ("5.0" has one digit after the point), scientific outside.
fn repr_precision(x: f64) -> u32 {
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap();
    let exponent: i32 = exponent.parse().unwrap();
    let digits = mantissa.chars().filter(char::is_ascii_digit).count() as i32;
    let decimal_exponent = if (-4..16).contains(&exponent) {
        -(digits - 1 - exponent).max(1)
    } else {
        exponent - (digits - 1)
    };
    decimal_exponent.unsigned_abs()
}

/// `num2words(x)` for a float from the text (finite, not negative).
pub fn cardinal_float(x: f64, source: &str) -> Result<String, TextError> {
    let refuse = || TextError::NumberNotReadable(source.chars().take(40).collect());
    if x.fract() == 0.0 {
        // `to_cardinal` takes a whole float down the integer path, in float arithmetic.
        if x >= 2f64.powi(53) {
            return Err(refuse());
        }
        return cardinal(&format!("{}", x as u64));
    }
    let whole = x.trunc();
    let precision = repr_precision(x);
    // `abs(value - pre) * 10**precision`: 10**precision as a float, correctly rounded.
    let scale: f64 = format!("1e{precision}").parse().unwrap();
    let post = (x - whole) * scale;
    let rounded = post.round_ties_even();
    let post = if (rounded - post).abs() < 0.01 {
        rounded
    } else {
        post.floor()
    };
    if !post.is_finite() || post >= 2f64.powi(127) {
        return Err(refuse());
    }
    let post = format!("{}", post as u128);
    let padded = "0".repeat((precision as usize).saturating_sub(post.len())) + &post;
    let mut words = vec![cardinal(&format!("{}", whole as u64))?];
    if precision > 0 {
        words.push("point".to_string());
    }
    for digit in padded.chars().take(precision as usize) {
        words.push(SMALL[digit.to_digit(10).unwrap() as usize].to_string());
    }
    Ok(words.join(" "))
}

/// A currency `num2words` knows in English, with its (singular, plural) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Currency {
    Gbp,
    Usd,
    Eur,
}

impl Currency {
    fn names(self) -> [(&'static str, &'static str); 2] {
        match self {
            Currency::Gbp => [("pound sterling", "pounds sterling"), ("penny", "pence")],
            Currency::Usd => [("dollar", "dollars"), ("cent", "cents")],
            Currency::Eur => [("euro", "euro"), ("cent", "cents")],
        }
    }
}

/// `num2words(amount, to="currency", currency=...)` with coqui's cut of ", zero cents" for a
/// whole amount; None where the reference raises (and then skips every currency step):
/// an amount past Decimal's 28 digits once quantized to cents.
pub fn currency(amount: f64, currency: Currency) -> Option<String> {
    let whole = amount.trunc();
    if whole >= 2f64.powi(100) {
        return None;
    }
    let mut units = whole as u128;
    // `Decimal(amount).quantize(Decimal(".01"), ROUND_HALF_UP)`.
    let thousandths = leading_fraction_digits(amount - whole, 3);
    let mut cents = thousandths / 10 + u64::from(thousandths % 10 >= 5);
    if cents == 100 {
        units += 1;
        cents = 0;
    }
    if units.checked_mul(100)? + cents as u128 >= 10u128.pow(28) {
        return None;
    }
    let [unit_names, cent_names] = currency.names();
    let pick = |n: u128, (one, many): (&'static str, &'static str)| if n == 1 { one } else { many };
    let units_words = cardinal(&units.to_string()).ok()?;
    let cents_words = cardinal(&cents.to_string()).ok()?;
    let full = format!(
        "{units_words} {}, {cents_words} {}",
        pick(units, unit_names),
        pick(cents as u128, cent_names)
    );
    if amount.fract() == 0.0 {
        if let Some(at) = full.rfind(", ") {
            return Some(full[..at].to_string());
        }
    }
    Some(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cardinals_as_num2words() {
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
    }

    #[test]
    fn ordinals_floats_and_money() {
        assert_eq!(ordinal("1").unwrap(), "first");
        assert_eq!(ordinal("22").unwrap(), "twenty-second");
        assert_eq!(ordinal("40").unwrap(), "fortieth");
        assert_eq!(ordinal("1200").unwrap(), "one thousand, two hundredth");
        assert_eq!(cardinal_float(12.5, "12.5").unwrap(), "twelve point five");
        assert_eq!(
            cardinal_float(0.05, "0.05").unwrap(),
            "zero point zero five"
        );
        assert_eq!(cardinal_float(3.0, "3.0").unwrap(), "three");
        assert_eq!(repr_precision(1e-5), 5);
        assert_eq!(repr_precision(1.5e-7), 8);
        assert_eq!(
            currency(20.15, Currency::Usd).unwrap(),
            "twenty dollars, fifteen cents"
        );
        assert_eq!(currency(1.0, Currency::Gbp).unwrap(), "one pound sterling");
        assert_eq!(
            currency(0.01, Currency::Eur).unwrap(),
            "zero euro, one cent"
        );
        assert_eq!(currency(1e27, Currency::Usd), None);
    }
}
