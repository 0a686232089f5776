//! Number words as Python's `num2words` 0.5.14 writes them, for the calls coqui's cleaner
//! makes: `num2words(int)`, `num2words(int, ordinal=True)`, `num2words(float)` and
//! `num2words(float, to="currency")`. Each language gives its integer words ([`en`], [`fr`],
//! [`de`]);
//! the float and currency paths are `Num2Word_Base`'s, shared:
//!
//! - a float's digits after the point come from its shortest repr ("12.50" is 12.5, "twelve
//!   point five"), and a whole float ("3.0") reads as an integer;
//! - currency rounds half up to cents (`Decimal.quantize`), fails past 28 digits, and coqui
//!   cuts the cents clause of a whole amount at the language's last "and".

pub mod de;
pub mod en;
pub mod fr;

use super::language::TextError;

/// Numbers past this many digits are refused (the split cardinals' values are `u128`).
const MAX_SPLIT_DIGITS: usize = 36;

/// A word and the value it stands for, as `splitnum` and `merge` pass them.
pub type Valued = (String, u128);

/// How a European language of `num2words` spells integers: `Num2Word_EU`'s cards and its
/// `merge` of two parts.
pub struct SplitCards {
    /// The word for one as a multiplier ("un", "eins").
    pub one: &'static str,
    /// The largest card at most `n`, with its word.
    pub largest_card_at_most: fn(u128) -> (u128, &'static str),
    pub merge: fn(Valued, Valued) -> Valued,
}

impl SplitCards {
    /// `splitnum` then `clean`: the multiplier merged with the card, then with the remainder.
    fn pair(&self, n: u128) -> Valued {
        let (card, word) = (self.largest_card_at_most)(n);
        let one = || (self.one.to_string(), 1);
        if n == 0 {
            return (self.merge)(one(), (word.to_string(), 0));
        }
        let (multiplier, remainder) = (n / card, n % card);
        let left = if multiplier == 1 {
            one()
        } else {
            self.pair(multiplier)
        };
        let head = (self.merge)(left, (word.to_string(), card));
        if remainder == 0 {
            head
        } else {
            (self.merge)(head, self.pair(remainder))
        }
    }

    /// Words for a run of ASCII digits, as `num2words(int(digits))`.
    pub fn cardinal(&self, digits: &str) -> Result<String, TextError> {
        let significant = digits.trim_start_matches('0');
        if significant.len() > MAX_SPLIT_DIGITS {
            return Err(unreadable(digits));
        }
        Ok(self.pair(significant.parse().unwrap_or(0)).0)
    }
}

/// A language's `num2words` converter, as coqui's cleaner calls it.
pub trait NumberWords {
    /// `num2words(int(digits))`.
    fn cardinal(&self, digits: &str) -> Result<String, TextError>;
    /// `num2words(int(digits), ordinal=True)`.
    fn ordinal(&self, digits: &str) -> Result<String, TextError>;
    /// `pointword`.
    fn point(&self) -> &'static str;
    /// The (singular, plural) names of the currency and of its cents.
    fn currency_names(&self, currency: Currency) -> [(&'static str, &'static str); 2];
    /// `to_currency`'s separator before the cents ("," in English, " et" in French).
    fn cents_separator(&self) -> &'static str;
    /// coqui's `and_equivalents`: where the cents clause of a whole amount is cut.
    fn and_word(&self) -> &'static str;
    /// The language's own change to `to_currency`'s text (German: "ein Euro").
    fn fix_currency(&self, amount: String) -> String {
        amount
    }
}

/// A refusal naming the number (its first 40 characters).
pub fn unreadable(source: &str) -> TextError {
    TextError::NumberNotReadable(source.chars().take(40).collect())
}

/// A currency coqui expands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Currency {
    Gbp,
    Usd,
    Eur,
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
pub fn float_words(words: &dyn NumberWords, x: f64, source: &str) -> Result<String, TextError> {
    if x.fract() == 0.0 {
        // `to_cardinal` takes a whole float down the integer path, in float arithmetic:
        // the same as integers below 2^53, not reproduced past it.
        if x >= 2f64.powi(53) {
            return Err(unreadable(source));
        }
        return words.cardinal(&format!("{}", x as u64));
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
        return Err(unreadable(source));
    }
    let post = format!("{}", post as u128);
    let padded = "0".repeat((precision as usize).saturating_sub(post.len())) + &post;
    let mut out = vec![words.cardinal(&format!("{}", whole as u64))?];
    if precision > 0 {
        out.push(words.point().to_string());
    }
    for digit in padded.chars().take(precision as usize) {
        out.push(words.cardinal(&digit.to_string())?);
    }
    Ok(out.join(" "))
}

/// `num2words(amount, to="currency", currency=...)` with coqui's cut of the cents clause for
/// a whole amount; None where the reference raises (and then skips every currency step):
/// an amount past Decimal's 28 digits once quantized to cents, or a currency the language's
/// converter lacks.
pub fn currency_words(words: &dyn NumberWords, amount: f64, currency: Currency) -> Option<String> {
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
    let [unit_names, cent_names] = words.currency_names(currency);
    let pick = |n: u128, (one, many): (&'static str, &'static str)| if n == 1 { one } else { many };
    let full = words.fix_currency(format!(
        "{} {}{} {} {}",
        words.cardinal(&units.to_string()).ok()?,
        pick(units, unit_names),
        words.cents_separator(),
        words.cardinal(&cents.to_string()).ok()?,
        pick(cents as u128, cent_names)
    ));
    if amount.fract() == 0.0 {
        if let Some(at) = full.rfind(words.and_word()) {
            return Some(full[..at].to_string());
        }
    }
    Some(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_and_money() {
        let english = en::English;
        assert_eq!(
            float_words(&english, 12.5, "12.5").unwrap(),
            "twelve point five"
        );
        assert_eq!(
            float_words(&english, 0.05, "0.05").unwrap(),
            "zero point zero five"
        );
        assert_eq!(float_words(&english, 3.0, "3.0").unwrap(), "three");
        assert_eq!(repr_precision(1e-5), 5);
        assert_eq!(repr_precision(1.5e-7), 8);
        let usd = currency_words(&english, 20.15, Currency::Usd);
        assert_eq!(usd.unwrap(), "twenty dollars, fifteen cents");
        let gbp = currency_words(&english, 1.0, Currency::Gbp);
        assert_eq!(gbp.unwrap(), "one pound sterling");
        let eur = currency_words(&english, 0.01, Currency::Eur);
        assert_eq!(eur.unwrap(), "zero euro, one cent");
        assert_eq!(currency_words(&english, 1e27, Currency::Usd), None);
        let french = fr::French;
        let eur = currency_words(&french, 20.15, Currency::Eur);
        assert_eq!(eur.unwrap(), "vingt euros et quinze centimes");
        let eur = currency_words(&french, 21.0, Currency::Eur);
        assert_eq!(eur.unwrap(), "vingt et un euros");
        assert_eq!(
            float_words(&french, 12.5, "12,5").unwrap(),
            "douze virgule cinq"
        );
    }
}
