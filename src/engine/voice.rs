//! A voice cloned from a reference clip, as a cloning family's encoder computed it and as its
//! sessions are conditioned on it: named tensors (e.g. a speaker embedding, reference codes),
//! kept by the server's voice store between requests and restarts. The [`VoiceEncoder`] that
//! computes them runs on a thread of its own (`scheduler::voice_encoding`), so that encoding
//! a clip never stalls a worker's decoding.

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
    pub fn insert(&mut self, name: &str, shape: Vec<usize>, data: TensorData) {
        self.0.insert(name.to_string(), VoiceTensor { shape, data });
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

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

/// Why a voice could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum VoiceEncodeError {
    /// The upload's fault (HTTP 400), e.g. a clip too short, too many clips, a transcript too
    /// long; `field` is the form field at fault.
    #[error("{message}")]
    Input {
        field: &'static str,
        message: String,
    },
    /// The engine failed (HTTP 500).
    #[error("computing the voice failed: {0}")]
    Engine(String),
}

impl VoiceEncodeError {
    pub fn input(field: &'static str, message: impl Into<String>) -> Self {
        VoiceEncodeError::Input {
            field,
            message: message.into(),
        }
    }
}

/// A cloning family's encoders (speaker embedding, reference codes, ...), loaded on their own
/// and owned by the voice-encoding thread that loaded them (tensors need not be `Send`).
pub trait VoiceEncoder {
    /// The rate the clips must have (mono).
    fn sample_rate(&self) -> u32;
    /// The voice of one or several clips of the same speaker at [`Self::sample_rate`], with
    /// the clips' transcript for families that clone in context. A family that takes one clip
    /// says so (an input error) when given several.
    fn encode(
        &self,
        clips: &[Vec<f32>],
        transcript: Option<&str>,
    ) -> Result<VoiceTensors, VoiceEncodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_are_read_back_by_name_and_type() {
        let mut t = VoiceTensors::default();
        t.insert("x", vec![2], TensorData::F32(vec![1.0, 2.0]));
        t.insert("codes", vec![1, 2], TensorData::I64(vec![3, 4]));
        assert_eq!(t.f32("x"), Some((&[2][..], &[1.0, 2.0][..])));
        assert_eq!(t.i64("codes").unwrap().1, &[3, 4]);
        assert_eq!(t.f32("codes"), None);
        assert_eq!(t.i64("y"), None);
        assert!(t.contains("x") && !t.contains("y"));
    }
}
