//! `tokenizers::tekken::Tekken::encode` (regex pre-tokenizer + byte-level BPE) on arbitrary
//! UTF-8, with the real 131k vocabulary.
//!
//! The vocabulary: `$VOXTRAL_TEKKEN` if set, else `.deps/ref/tekken_240911.json` (installed
//! by `scripts/setup.sh`), else a small generated one (`write_test_tekken`, 2000 merges).
//! Besides "never panics", checks that every id is a regular token (no special token comes
//! out of plain text) and that the ids decode back to the input bytes: the tokenizer has no
//! decoder, so the rank -> bytes table is read from the same JSON here.
#![no_main]

use base64::Engine;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use voxtral_tts::testkit::tekken::write_test_tekken;
use voxtral_tts::tokenizers::tekken::Tekken;

struct Vocab {
    tekken: Tekken,
    /// Token bytes by rank (id - num_special_tokens).
    bytes: Vec<Vec<u8>>,
}

fn tekken_path() -> PathBuf {
    if let Some(p) = std::env::var_os("VOXTRAL_TEKKEN") {
        return p.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let deps = std::env::var_os("VOXTRAL_DEPS").map_or(root.join(".deps"), PathBuf::from);
    let real = deps.join("ref/tekken_240911.json");
    if real.is_file() {
        return real;
    }
    let generated =
        std::env::temp_dir().join(format!("voxtral-fuzz-{}-tekken.json", std::process::id()));
    write_test_tekken(&generated, 2000, &BTreeMap::new()).expect("writing the test tekken.json");
    generated
}

fn vocab() -> &'static Vocab {
    static VOCAB: OnceLock<Vocab> = OnceLock::new();
    VOCAB.get_or_init(|| {
        let path = tekken_path();
        eprintln!("tokenizer fuzz target: vocabulary {}", path.display());
        let json = std::fs::read_to_string(&path).expect("reading tekken.json");
        let tekken =
            Tekken::from_json_str(&json, &path.display().to_string()).expect("loading tekken.json");
        let root: serde_json::Value = serde_json::from_str(&json).unwrap();
        let n_regular = tekken.vocab_size() - tekken.num_special_tokens();
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut bytes = vec![Vec::new(); n_regular];
        for entry in root["vocab"].as_array().unwrap() {
            let rank = entry["rank"].as_u64().unwrap() as usize;
            if rank < n_regular {
                bytes[rank] = b64.decode(entry["token_bytes"].as_str().unwrap()).unwrap();
            }
        }
        Vocab { tekken, bytes }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let v = vocab();
    let ids = v.tekken.encode(text);
    let special = v.tekken.num_special_tokens() as u32;
    let mut decoded = Vec::with_capacity(text.len());
    for &id in &ids {
        assert!(
            id >= special && (id as usize) < v.tekken.vocab_size(),
            "id {id} out of the regular range for {text:?}"
        );
        decoded.extend_from_slice(&v.bytes[(id - special) as usize]);
    }
    assert_eq!(
        decoded,
        text.as_bytes(),
        "ids {ids:?} do not decode to the input"
    );
});
