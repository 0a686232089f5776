//! `models::voxtral_tts::params::Config::from_json`: the `params.json` parser and the checks and derived
//! sizes computed from it. Never panics (arithmetic overflow included: fuzz builds keep
//! debug assertions); an accepted config has one table offset per codebook.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxtral_tts::models::voxtral_tts::params::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::from_json(text, "params.json") {
        assert_eq!(config.codebook_offsets.len(), config.n_codebooks);
        let _ = (config.sample_rate(), config.latent_dim(), config.flow());
    }
});
