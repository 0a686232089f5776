//! XTTS-v2's 17 languages, the names a request gives them, and the text errors.

use std::fmt;

/// A language XTTS-v2 speaks, as `VoiceBpeTokenizer` knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    En,
    Es,
    Fr,
    De,
    It,
    Pt,
    Pl,
    Tr,
    Ru,
    Nl,
    Cs,
    Ar,
    Zh,
    Hu,
    Ko,
    Ja,
    Hi,
}

impl Language {
    /// Every language, in the order of the published config.json's `languages`.
    pub const ALL: [Language; 17] = [
        Language::En,
        Language::Es,
        Language::Fr,
        Language::De,
        Language::It,
        Language::Pt,
        Language::Pl,
        Language::Tr,
        Language::Ru,
        Language::Nl,
        Language::Cs,
        Language::Ar,
        Language::Zh,
        Language::Hu,
        Language::Ko,
        Language::Ja,
        Language::Hi,
    ];

    /// The reference's name once the region is cut: "zh" for Chinese.
    pub fn code(self) -> &'static str {
        match self {
            Language::En => "en",
            Language::Es => "es",
            Language::Fr => "fr",
            Language::De => "de",
            Language::It => "it",
            Language::Pt => "pt",
            Language::Pl => "pl",
            Language::Tr => "tr",
            Language::Ru => "ru",
            Language::Nl => "nl",
            Language::Cs => "cs",
            Language::Ar => "ar",
            Language::Zh => "zh",
            Language::Hu => "hu",
            Language::Ko => "ko",
            Language::Ja => "ja",
            Language::Hi => "hi",
        }
    }

    /// The vocabulary's tag that starts the text: `[zh-cn]` for Chinese.
    pub fn tag(self) -> String {
        match self {
            Language::Zh => "[zh-cn]".to_string(),
            other => format!("[{}]", other.code()),
        }
    }

    /// A request's language as `VoiceBpeTokenizer.encode` reads it: the part before the first
    /// "-" ("en-US" is English, "zh-cn" Chinese), case-sensitive.
    pub fn parse(name: &str) -> Result<Language, TextError> {
        let base = name.split('-').next().unwrap_or_default();
        Language::ALL
            .into_iter()
            .find(|language| language.code() == base)
            .ok_or_else(|| TextError::UnknownLanguage(name.to_string()))
    }

    /// The reference's per-language character limit (`char_limits`). Past it the reference
    /// only logs a warning and encodes the whole text; the limit is its sentence-splitting
    /// length (`split_sentence`) when text splitting is on.
    pub fn char_limit(self) -> usize {
        match self {
            Language::En => 250,
            Language::De => 253,
            Language::Fr => 273,
            Language::Es => 239,
            Language::It => 213,
            Language::Pt => 203,
            Language::Pl => 224,
            Language::Zh => 82,
            Language::Ar => 166,
            Language::Cs => 186,
            Language::Ru => 182,
            Language::Nl => 251,
            Language::Tr => 226,
            Language::Ja => 71,
            Language::Hu => 224,
            Language::Ko => 95,
            Language::Hi => 150,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Text XTTS-v2 cannot read exactly as the reference would: a 400 naming what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("XTTS-v2 does not speak the language {0:?}; it speaks en, es, fr, de, it, pt, pl, tr, ru, nl, cs, ar, zh-cn, hu, ko, ja, hi")]
    UnknownLanguage(String),
    #[error("{language} text is not supported yet: the reference reads it only after {needs}, which this server does not reproduce exactly; use another language")]
    NeedsRomanization {
        language: Language,
        needs: &'static str,
    },
    #[error("this model's vocab.json has no {} tag, so it cannot speak {language} (its config.json lists it)", .language.tag())]
    NoLanguageTag { language: Language },
    #[error("numbers in {language} text are not read out yet ({found:?}): spell the numbers out in words")]
    NumbersNotExpanded { language: Language, found: String },
    #[error("the number {0:?} cannot be read out: spell it out in words")]
    NumberNotReadable(String),
}

impl TextError {
    /// The request field at fault.
    pub fn param(&self) -> &'static str {
        match self {
            TextError::UnknownLanguage(_)
            | TextError::NeedsRomanization { .. }
            | TextError::NoLanguageTag { .. } => "language",
            TextError::NumbersNotExpanded { .. } | TextError::NumberNotReadable(_) => "input",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_reference_cuts_them() {
        assert_eq!(Language::parse("en"), Ok(Language::En));
        assert_eq!(Language::parse("en-US"), Ok(Language::En));
        assert_eq!(Language::parse("zh-cn"), Ok(Language::Zh));
        assert_eq!(Language::Zh.tag(), "[zh-cn]");
        assert_eq!(Language::Hi.tag(), "[hi]");
        assert!(matches!(
            Language::parse("EN"),
            Err(TextError::UnknownLanguage(_))
        ));
        assert!(matches!(
            Language::parse("sv"),
            Err(TextError::UnknownLanguage(_))
        ));
        assert_eq!(Language::parse("sv").unwrap_err().param(), "language");
    }
}
