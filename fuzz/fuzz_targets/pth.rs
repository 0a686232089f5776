//! `nn::pth::PthCheckpoint` (PyTorch checkpoints read without executing their pickle, through
//! `pytorch-reader`) and the XTTS-v2 readers on top of it (`models::xtts::checkpoint`) on
//! arbitrary bytes.
//!
//! Input: the file. It is opened twice: as `model.pth` (the state dict under "model", key
//! normalisation) and as `speakers_xtts.pth` (the whole file). Never panics; every tensor read
//! has the size its dtype and shape say. Tensors over 16 MiB are not read: a stride-0 view can
//! legally expand a few bytes of storage to gigabytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxtral_tts::models::xtts::checkpoint::{ModelPth, SpeakersPth};
use voxtral_tts::nn::pth::{PthCheckpoint, PthEntry};

const MAX_READ: usize = 16 << 20;

fn check(
    entry: &PthEntry,
    read: impl Fn(&PthEntry) -> Result<Vec<u8>, voxtral_tts::nn::LoadError>,
) {
    if entry.byte_len() <= MAX_READ {
        if let Ok(bytes) = read(entry) {
            assert_eq!(bytes.len(), entry.byte_len());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(pth) = PthCheckpoint::from_bytes(data.to_vec(), "fuzz.pth", Some("model")) {
        if let Ok(model) = ModelPth::from_checkpoint(pth) {
            for (_, entry) in model.tensors() {
                check(entry, |e| model.read(e));
            }
        }
    }
    if let Ok(pth) = PthCheckpoint::from_bytes(data.to_vec(), "fuzz.pth", None) {
        for entry in pth.entries() {
            check(entry, |e| pth.read(e));
        }
        if let Ok(speakers) = SpeakersPth::from_checkpoint(pth) {
            for (_, voice) in speakers.speakers() {
                check(voice.gpt_cond_latent, |e| speakers.read(e));
                check(voice.speaker_embedding, |e| speakers.read(e));
            }
        }
    }
});
