//! Voxtral Realtime (Voxtral-Mini-4B-Realtime-2602), speech to text: the folder's
//! configuration (`params.json` and tekken.json's `audio` section), the log-mel front end,
//! the causal conv stem, the audio encoder, the adapter to the text decoder's width, the
//! delay-conditioned text decoder, offline greedy transcription, its offline-exact
//! streaming form, and many utterances decoded in one batched step, behind the
//! speech-to-text interface (`engine.rs`) (docs/voxtral-realtime-spec.md in the shared docs).

pub mod adapter;
pub mod audio_tower;
pub mod batch;
pub mod bench;
pub mod conv_stem;
pub mod encoder;
pub mod engine;
pub mod family;
pub mod keys;
pub mod mel;
pub mod params;
pub mod prompt;
pub mod streaming;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod text_decoder;
pub mod timing;
pub mod transcriber;
