//! `models::voxtral_tts::voices::read_pt_from`: the `.pt` voice reader (PyTorch zip; the pickle is only
//! searched, never run) on arbitrary bytes.
//!
//! Input: bytes 0..4 are the expected row count and 4..8 the width (u32 little-endian, as
//! `tekken.json` and `params.json` would give them), the rest is the file. Never panics; an
//! accepted voice has exactly `rows * dim` values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Cursor;
use voxtral_tts::models::voxtral_tts::voices::read_pt_from;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let n = u32::from_le_bytes(data[0..4].try_into().unwrap()) as usize;
    let dim = u32::from_le_bytes(data[4..8].try_into().unwrap()) as usize;
    if let Ok(voice) = read_pt_from(Cursor::new(&data[8..]), "fuzz.pt", n, dim) {
        assert_eq!(voice.rows, n);
        assert_eq!(voice.data.len(), n * dim);
    }
});
