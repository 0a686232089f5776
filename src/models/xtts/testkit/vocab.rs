//! A small XTTS-v2 `vocab.json` in the published format (the real files cannot be fetched
//! here): a `tokenizers` JSON with a BPE model, the `Whitespace` pre-tokenizer, no normalizer,
//! `[UNK]` as the unknown token, and the special tokens as added tokens. The ids follow the
//! published layout where it matters: `[STOP]` 0, `[UNK]` 1, `[SPACE]` 2, `[en]` 259, `[de]`
//! 260, `[START]` 261 (config.json's `gpt_start_text_token`), `[fr]` 262; the other language
//! tags sit after the regular tokens. The regular tokens are the characters of the 17
//! languages' alphabets (some deliberately left out, so that `[UNK]` is exercised) and a few
//! hundred merges, enough that BPE merges across every Latin-script language's words.

use serde_json::{json, Map, Value};

/// Ids the published vocabulary gives these tokens; every other id is filled in order.
const FIXED_IDS: [(u32, &str); 7] = [
    (0, "[STOP]"),
    (1, "[UNK]"),
    (2, "[SPACE]"),
    (259, "[en]"),
    (260, "[de]"),
    (261, "[START]"),
    (262, "[fr]"),
];

/// The language tags not in [`FIXED_IDS`], appended after the regular tokens.
const LATER_TAGS: [&str; 14] = [
    "[es]", "[it]", "[pt]", "[pl]", "[tr]", "[ru]", "[nl]", "[cs]", "[ar]", "[zh-cn]", "[hu]",
    "[ko]", "[ja]", "[hi]",
];

/// Single characters: punctuation, the Latin letters and what the Latin-script languages add,
/// Cyrillic, Arabic and Devanagari (a sample), and U+0307 (what "İ".lower() leaves behind).
/// Left out on purpose: digits, `"`, `&`, `@`, `%`, `#`, `$`, `£`, `€`, `°`, emoji, CJK.
const CHARACTERS: &str = concat!(
    "!'(),-.:;?/¿¡…«»–—",
    "abcdefghijklmnopqrstuvwxyz",
    "ßäöüœïêâÿèàëùîçæôûáéíóúñńśęążćãşğıòìõøčōšžźłőűěřůýťďň",
    "\u{307}",
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
    "ابتثجحخدذرزسشصضطظعغفقكلمنهويءآأؤإئةى",
    "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसहािीुूेैोौंःँ्।",
);

/// BPE merges in rank order; each merged token joins the vocabulary after its parts. The
/// English ones follow the published file's first merges.
const MERGES: &[(&str, &str)] = &[
    ("t", "h"),
    ("i", "n"),
    ("th", "e"),
    ("a", "n"),
    ("e", "r"),
    ("o", "u"),
    ("r", "e"),
    ("o", "n"),
    ("a", "t"),
    ("e", "d"),
    ("e", "n"),
    ("t", "o"),
    ("in", "g"),
    ("an", "d"),
    ("i", "s"),
    ("a", "s"),
    ("a", "l"),
    ("o", "r"),
    ("o", "f"),
    ("a", "r"),
    ("i", "t"),
    ("e", "s"),
    ("h", "e"),
    ("s", "t"),
    ("l", "e"),
    ("o", "m"),
    ("s", "e"),
    ("h", "u"),
    ("hu", "n"),
    ("hun", "d"),
    ("hund", "r"),
    ("hundr", "ed"),
    ("t", "w"),
    ("tw", "en"),
    ("twen", "t"),
    ("twent", "y"),
    ("f", "i"),
    ("fi", "f"),
    ("fif", "t"),
    ("fift", "y"),
    ("th", "ou"),
    ("thou", "s"),
    ("thous", "and"),
    ("n", "e"),
    ("o", "ne"),
    ("p", "o"),
    ("po", "in"),
    ("poin", "t"),
    ("d", "o"),
    ("do", "l"),
    ("dol", "l"),
    ("doll", "ar"),
    ("c", "en"),
    ("cen", "t"),
    ("p", "er"),
    ("per", "c"),
    ("en", "t"),
    ("perc", "ent"),
    ("e", "u"),
    ("eu", "r"),
    ("eur", "o"),
    ("m", "i"),
    ("mi", "s"),
    ("mis", "t"),
    ("mist", "er"),
    ("do", "c"),
    ("doc", "t"),
    ("doct", "or"),
    ("e", "i"),
    ("c", "h"),
    ("i", "ch"),
    ("s", "ch"),
    ("u", "n"),
    ("un", "d"),
    ("ü", "r"),
    ("f", "ür"),
    ("q", "u"),
    ("qu", "e"),
    ("l", "a"),
    ("d", "e"),
    ("é", "t"),
    ("è", "re"),
    ("e", "l"),
    ("ñ", "o"),
    ("ç", "ã"),
    ("çã", "o"),
    ("z", "y"),
    ("p", "r"),
    ("pr", "o"),
    ("ł", "a"),
    ("ı", "n"),
    ("ş", "ı"),
    ("s", "z"),
    ("c", "s"),
    ("ő", "r"),
    ("ř", "e"),
    ("ě", "t"),
    ("и", "й"),
    ("п", "р"),
    ("пр", "и"),
    ("о", "в"),
    ("с", "т"),
    ("ا", "ل"),
    ("ال", "م"),
    ("क", "ा"),
    ("न", "े"),
    ("i", "j"),
    ("o", "e"),
];

/// The `vocab.json` text: ids in the published layout ([`FIXED_IDS`]), then every character,
/// merged token and the remaining language tags in order.
pub fn xtts_vocab_json() -> String {
    let mut tokens: Vec<Option<String>> = Vec::new();
    let place = |tokens: &mut Vec<Option<String>>, token: String| {
        if tokens.iter().flatten().any(|known| *known == token) {
            return;
        }
        let free = (0..)
            .find(|&id| tokens.get(id).is_none_or(|slot| slot.is_none()))
            .unwrap();
        if free >= tokens.len() {
            tokens.resize(free + 1, None);
        }
        tokens[free] = Some(token);
    };
    for (id, token) in FIXED_IDS {
        let id = id as usize;
        if id >= tokens.len() {
            tokens.resize(id + 1, None);
        }
        tokens[id] = Some(token.to_string());
    }
    for character in CHARACTERS.chars() {
        place(&mut tokens, character.to_string());
    }
    let mut merges = Vec::new();
    for (left, right) in MERGES {
        for part in [left, right] {
            assert!(
                tokens.iter().flatten().any(|known| known == part),
                "merge part {part:?} is neither a character nor an earlier merge"
            );
        }
        let merge = format!("{left} {right}");
        if !merges.contains(&merge) {
            merges.push(merge);
        }
        place(&mut tokens, format!("{left}{right}"));
    }
    for tag in LATER_TAGS {
        place(&mut tokens, tag.to_string());
    }
    let tokens: Vec<String> = tokens
        .into_iter()
        .map(|token| token.expect("the regular tokens fill every id below the fixed ones"))
        .collect();

    let is_special =
        |token: &str| token.starts_with('[') && token.ends_with(']') && token.len() > 2;
    let added_tokens: Vec<Value> = tokens
        .iter()
        .enumerate()
        .filter(|(_, token)| is_special(token))
        .map(|(id, token)| {
            json!({
                "id": id, "special": true, "content": token, "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false,
            })
        })
        .collect();
    let vocab: Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), json!(id)))
        .collect();
    let document = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": "[UNK]",
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "vocab": vocab,
            "merges": merges,
        },
    });
    serde_json::to_string_pretty(&document).unwrap() + "\n"
}
