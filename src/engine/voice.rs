//! Custom voices, what every cloning family shares: the tensors a family computes from a
//! reference clip (stored by `server::voice_store`, read back by the family's engine) and the
//! [`VoiceEncoder`] that computes them, run on its own thread (`scheduler::voice_encoding`)
//! so that encoding a clip never stalls a worker's decoding.

use std::collections::BTreeMap;

/// A voice's tensors by name; each family documents the names it writes and reads.
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

impl VoiceTensors {
    pub fn insert(&mut self, name: &str, shape: Vec<usize>, data: TensorData) {
        self.0.insert(name.to_string(), VoiceTensor { shape, data });
    }

    /// The f32 tensor `name` (its shape and values), or why there is none.
    pub fn f32(&self, name: &str) -> Result<(&[usize], &[f32]), String> {
        match self.0.get(name) {
            Some(VoiceTensor {
                shape,
                data: TensorData::F32(values),
            }) => Ok((shape, values)),
            Some(_) => Err(format!("voice tensor {name}: expected f32")),
            None => Err(format!("voice tensor {name}: missing")),
        }
    }

    /// The i64 tensor `name` (its shape and values), or why there is none.
    pub fn i64(&self, name: &str) -> Result<(&[usize], &[i64]), String> {
        match self.0.get(name) {
            Some(VoiceTensor {
                shape,
                data: TensorData::I64(values),
            }) => Ok((shape, values)),
            Some(_) => Err(format!("voice tensor {name}: expected i64")),
            None => Err(format!("voice tensor {name}: missing")),
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
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
        assert_eq!(t.f32("x").unwrap(), (&[2][..], &[1.0, 2.0][..]));
        assert_eq!(t.i64("codes").unwrap().1, &[3, 4]);
        assert!(t.f32("codes").unwrap_err().contains("expected f32"));
        assert!(t.i64("y").unwrap_err().contains("missing"));
        assert!(t.contains("x") && !t.contains("y"));
    }
}
