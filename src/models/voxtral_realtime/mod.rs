//! Voxtral Realtime (Voxtral-Mini-4B-Realtime-2602), speech to text: the folder's
//! configuration (`params.json` and tekken.json's `audio` section), the log-mel front end,
//! the causal conv stem, the audio encoder and the adapter to the text decoder's width. The
//! delay-conditioned text decoder follows (docs/voxtral-realtime-spec.md in the shared docs).

pub mod adapter;
pub mod audio_tower;
pub mod conv_stem;
pub mod encoder;
pub mod mel;
mod ops;
pub mod params;
pub mod prompt;
