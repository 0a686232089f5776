//! One module per endpoint group; each handler carries its OpenAPI description.

pub mod health;
pub mod metrics;
pub mod models;
pub mod playground;
pub mod realtime;
pub mod speech;
pub mod speech_realtime;
pub mod transcription_realtime;
pub mod transcriptions;
pub mod voices;
pub mod ws;
