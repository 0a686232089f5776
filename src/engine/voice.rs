//! A voice cloned from a reference clip, as a cloning family's encoder computed it and as its
//! sessions are conditioned on it: named tensors (e.g. a speaker embedding, reference codes),
//! kept by the server's voice store between requests and restarts.

use std::collections::BTreeMap;

/// How every custom voice's id begins (`voice_` and 32 hex digits), as OpenAI's do: a
/// request's voice with it names a stored voice, not a preset.
pub const CUSTOM_VOICE_PREFIX: &str = "voice_";

/// A voice's tensors by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VoiceTensors(pub BTreeMap<String, VoiceTensor>);

#[derive(Clone, Debug, PartialEq)]
pub struct VoiceTensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

/// A stored voice a request selected (`voice: {"id": "voice_..."}`).
#[derive(Clone, Debug, PartialEq)]
pub struct CustomVoice {
    pub id: String,
    /// The clip's transcript, for families that clone in context.
    pub transcript: Option<String>,
    pub tensors: VoiceTensors,
}

impl VoiceTensors {
    /// The f32 tensor `name`, if the voice has one of that type.
    pub fn f32(&self, name: &str) -> Option<(&[usize], &[f32])> {
        match self.0.get(name)? {
            VoiceTensor {
                shape,
                data: TensorData::F32(v),
            } => Some((shape, v)),
            _ => None,
        }
    }

    /// The integer tensor `name`, if the voice has one of that type.
    pub fn i64(&self, name: &str) -> Option<(&[usize], &[i64])> {
        match self.0.get(name)? {
            VoiceTensor {
                shape,
                data: TensorData::I64(v),
            } => Some((shape, v)),
            _ => None,
        }
    }
}
