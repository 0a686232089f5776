//! The talker's prefill, position by position (spec section 5): which text id and which codec
//! input each position sums, and the trailing text ids fed one per decode step. Host-side
//! only; `model.rs` embeds it.
//!
//! Every position is `P(text) + codec`, except the instruct and role positions (text only).
//! The codec prefix is `[think, think_bos, lang, think_eos]` (or `[nothink, think_bos,
//! think_eos]` for "auto"), then the speaker (a preset's codec id, or a cloned voice's
//! x-vector), then `[pad, bos]`.

use super::config::{Qwen3TtsConfig, TtsModelType};

/// The target text as the official wrapper wraps it before tokenizing (spec section 4).
pub fn target_text(text: &str) -> String {
    format!("<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
}

/// A reference clip's transcript, wrapped (in-context cloning).
pub fn reference_text(text: &str) -> String {
    format!("<|im_start|>assistant\n{text}<|im_end|>\n")
}

/// An instruction, wrapped.
pub fn instruct_text(instruct: &str) -> String {
    format!("<|im_start|>user\n{instruct}<|im_end|>\n")
}

/// Ids of the role (`<|im_start|>assistant\n`) before a wrapped text.
const ROLE: usize = 3;
/// Ids after the target text (`<|im_end|>\n<|im_start|>assistant\n`).
const TARGET_TAIL: usize = 5;
/// Ids after a reference text (`<|im_end|>\n`).
const REFERENCE_TAIL: usize = 2;

/// How the target text reaches the talker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextLayout {
    /// One text token per decode step (`non_streaming_mode=False`; the official default for
    /// Base).
    Streaming,
    /// The whole text in the prefill over codec pads (the official default for CustomVoice
    /// and VoiceDesign).
    NonStreaming,
}

impl TextLayout {
    /// The official wrappers' default for a model type (spec 5.6).
    pub fn default_for(model_type: TtsModelType) -> Self {
        match model_type {
            TtsModelType::Base => TextLayout::Streaming,
            TtsModelType::CustomVoice | TtsModelType::VoiceDesign => TextLayout::NonStreaming,
        }
    }
}

/// Who speaks.
#[derive(Clone, Copy, Debug)]
pub enum Voice<'a> {
    /// A CustomVoice preset speaker (`talker_config.spk_id`), by name, any case.
    Speaker(&'a str),
    /// VoiceDesign: the voice is what the instruction describes.
    Designed,
    /// Base: a voice cloned from a clip.
    Cloned(&'a ClonedVoice),
}

/// What a Base model needs of a reference clip.
#[derive(Clone, Debug)]
pub struct ClonedVoice {
    /// The speaker encoder's x-vector, as wide as the talker.
    pub x_vector: Vec<f32>,
    /// For in-context cloning: the clip's transcript and codes. Without it, x-vector only.
    pub reference: Option<Reference>,
}

#[derive(Clone, Debug)]
pub struct Reference {
    /// `<|im_start|>assistant\n{ref_text}<|im_end|>\n`, tokenized.
    pub text_ids: Vec<u32>,
    /// The speech tokenizer's codes of the clip, one row of 16 per frame.
    pub codes: Vec<Vec<u32>>,
}

/// One request's prompt inputs.
#[derive(Clone, Copy, Debug)]
pub struct PromptInput<'a> {
    /// `<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n`, tokenized.
    pub text_ids: &'a [u32],
    /// `<|im_start|>user\n{instruct}<|im_end|>\n`, tokenized; ignored by models that drop
    /// instructions (0.6B CustomVoice), as the official wrapper does.
    pub instruct_ids: Option<&'a [u32]>,
    /// "auto" or a `codec_language_id` language, any case.
    pub language: &'a str,
    pub voice: Voice<'a>,
    pub layout: TextLayout,
}

/// The codec-side input of a prefill position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecInput {
    /// `talker.codec_embedding` of this id.
    Id(u32),
    /// The cloned voice's x-vector.
    XVector,
    /// Reference frame `k`: the sum of its 16 codebooks' embeddings.
    RefFrame(usize),
}

/// One prefill position: `P(text)`, plus the codec input if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub text: u32,
    pub codec: Option<CodecInput>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptLayout {
    pub positions: Vec<Position>,
    /// Text ids added to decode steps `0, 1, ...`; after them, `<tts_pad>`.
    pub trailing: Vec<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PromptError {
    #[error("unknown language {0:?}; this model knows {1}")]
    UnknownLanguage(String, String),
    #[error("unknown speaker {0:?}; this model has {1}")]
    UnknownSpeaker(String, String),
    #[error("a {model:?} model takes {wants}")]
    WrongVoice {
        model: TtsModelType,
        wants: &'static str,
    },
    #[error("{what} holds {got} ids; a wrapped text needs at least {need}")]
    TooShort {
        what: &'static str,
        got: usize,
        need: usize,
    },
    #[error("the x-vector has {got} values; this model's talker is {want} wide")]
    XVectorWidth { got: usize, want: usize },
    #[error("reference frame {frame} has {got} codes, expected {want}")]
    RefFrameWidth {
        frame: usize,
        got: usize,
        want: usize,
    },
    #[error("reference frame {frame}: code {code} is outside 0..{max}")]
    RefCode { frame: usize, code: u32, max: usize },
    #[error("the reference has no frames")]
    EmptyReference,
    #[error("text id {id} is outside the text vocabulary (0..{vocab})")]
    TextId { id: u32, vocab: usize },
}

/// The prefill of `input` for a model of `config` (spec section 5).
pub fn layout(
    config: &Qwen3TtsConfig,
    input: &PromptInput<'_>,
) -> Result<PromptLayout, PromptError> {
    let t = &config.talker_config;
    let (pad_t, bos_t, eos_t) = (
        config.tts_pad_token_id,
        config.tts_bos_token_id,
        config.tts_eos_token_id,
    );
    let ids = input.text_ids;
    if ids.len() < ROLE + 1 + TARGET_TAIL {
        return Err(PromptError::TooShort {
            what: "the text",
            got: ids.len(),
            need: ROLE + 1 + TARGET_TAIL,
        });
    }
    let text = &ids[ROLE..ids.len() - TARGET_TAIL];
    check_text_ids(config, ids)?;
    check_text_ids(config, input.instruct_ids.unwrap_or_default())?;
    let (speaker, reference) = check_voice(config, input.voice)?;
    let codec = codec_prefix(config, input.language, speaker)?;

    let instruct = match input.instruct_ids {
        Some(ids) if !ids.is_empty() => match config.tts_model_type {
            TtsModelType::Base => {
                return Err(PromptError::WrongVoice {
                    model: TtsModelType::Base,
                    wants: "no instruction",
                })
            }
            TtsModelType::CustomVoice if config.ignores_instruct() => &[][..],
            _ => ids,
        },
        _ => &[][..],
    };
    let text_only = |id: u32| Position {
        text: id,
        codec: None,
    };
    let with = |text: u32, codec: CodecInput| Position {
        text,
        codec: Some(codec),
    };
    let mut positions: Vec<Position> = instruct.iter().copied().map(text_only).collect();
    positions.extend(ids[..ROLE].iter().copied().map(text_only));
    // The codec prefix but its last entry (bos), over `<tts_pad>` and a final `<tts_text_bos>`.
    let overlay = codec.len() - 1;
    positions.extend(
        codec[..overlay]
            .iter()
            .enumerate()
            .map(|(k, &c)| with(if k + 1 < overlay { pad_t } else { bos_t }, c)),
    );
    let (codec_pad, codec_bos) = (
        CodecInput::Id(t.codec_pad_id),
        CodecInput::Id(t.codec_bos_id),
    );

    let trailing = match (reference, input.layout) {
        (Some(reference), layout) => {
            let ref_ids = &reference.text_ids;
            check_text_ids(config, ref_ids)?;
            if ref_ids.len() < ROLE + REFERENCE_TAIL {
                return Err(PromptError::TooShort {
                    what: "the reference text",
                    got: ref_ids.len(),
                    need: ROLE + REFERENCE_TAIL,
                });
            }
            let mut text_side: Vec<u32> = ref_ids[ROLE..ref_ids.len() - REFERENCE_TAIL].to_vec();
            text_side.extend_from_slice(text);
            text_side.push(eos_t);
            let codec_side: Vec<CodecInput> = std::iter::once(codec_bos)
                .chain((0..reference.codes.len()).map(CodecInput::RefFrame))
                .collect();
            match layout {
                TextLayout::NonStreaming => {
                    positions.extend(text_side.iter().map(|&id| with(id, codec_pad)));
                    positions.extend(codec_side.iter().map(|&c| with(pad_t, c)));
                    vec![pad_t]
                }
                TextLayout::Streaming if text_side.len() > codec_side.len() => {
                    let (now, later) = text_side.split_at(codec_side.len());
                    positions.extend(now.iter().zip(&codec_side).map(|(&id, &c)| with(id, c)));
                    later.to_vec()
                }
                TextLayout::Streaming => {
                    let padded = text_side.iter().copied().chain(std::iter::repeat(pad_t));
                    positions.extend(padded.zip(&codec_side).map(|(id, &c)| with(id, c)));
                    vec![pad_t]
                }
            }
        }
        (None, TextLayout::Streaming) => {
            positions.push(with(text[0], codec_bos));
            text[1..].iter().copied().chain([eos_t]).collect()
        }
        (None, TextLayout::NonStreaming) => {
            positions.extend(text.iter().chain(&[eos_t]).map(|&id| with(id, codec_pad)));
            positions.push(with(pad_t, codec_bos));
            vec![pad_t]
        }
    };
    Ok(PromptLayout {
        positions,
        trailing,
    })
}

/// The speaker's codec input and the in-context reference, checked against the model type.
fn check_voice<'a>(
    config: &Qwen3TtsConfig,
    voice: Voice<'a>,
) -> Result<(Option<SpeakerInput>, Option<&'a Reference>), PromptError> {
    let t = &config.talker_config;
    let model = config.tts_model_type;
    match (model, voice) {
        (TtsModelType::CustomVoice, Voice::Speaker(name)) => {
            let key = name.to_lowercase();
            let Some(&id) = t.spk_id.get(&key) else {
                let known: Vec<&str> = t.spk_id.keys().map(String::as_str).collect();
                return Err(PromptError::UnknownSpeaker(
                    name.to_string(),
                    known.join(", "),
                ));
            };
            let dialect = t.spk_is_dialect.get(&key).cloned().flatten();
            Ok((Some(SpeakerInput::Preset { id, dialect }), None))
        }
        (TtsModelType::VoiceDesign, Voice::Designed) => Ok((None, None)),
        (TtsModelType::Base, Voice::Cloned(voice)) => {
            if voice.x_vector.len() != t.hidden_size {
                return Err(PromptError::XVectorWidth {
                    got: voice.x_vector.len(),
                    want: t.hidden_size,
                });
            }
            if let Some(reference) = &voice.reference {
                check_codes(config, &reference.codes)?;
            }
            Ok((Some(SpeakerInput::XVector), voice.reference.as_ref()))
        }
        (model, _) => Err(PromptError::WrongVoice {
            model,
            wants: match model {
                TtsModelType::Base => "a cloned voice",
                TtsModelType::CustomVoice => "a preset speaker",
                TtsModelType::VoiceDesign => "a voice designed by its instruction",
            },
        }),
    }
}

fn check_text_ids(config: &Qwen3TtsConfig, ids: &[u32]) -> Result<(), PromptError> {
    let vocab = config.talker_config.text_vocab_size;
    match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(&id) => Err(PromptError::TextId { id, vocab }),
        None => Ok(()),
    }
}

fn check_codes(config: &Qwen3TtsConfig, codes: &[Vec<u32>]) -> Result<(), PromptError> {
    let p = &config.talker_config.code_predictor_config;
    if codes.is_empty() {
        return Err(PromptError::EmptyReference);
    }
    for (frame, row) in codes.iter().enumerate() {
        if row.len() != p.num_code_groups {
            return Err(PromptError::RefFrameWidth {
                frame,
                got: row.len(),
                want: p.num_code_groups,
            });
        }
        if let Some(&code) = row.iter().find(|&&c| c as usize >= p.vocab_size) {
            return Err(PromptError::RefCode {
                frame,
                code,
                max: p.vocab_size,
            });
        }
    }
    Ok(())
}

/// The speaker position of the codec prefix.
enum SpeakerInput {
    /// A preset's codec id, and the dialect it speaks for Chinese and "auto".
    Preset {
        id: u32,
        dialect: Option<String>,
    },
    XVector,
}

/// `[think, think_bos, lang, think_eos]` or `[nothink, think_bos, think_eos]`, the speaker,
/// then `[pad, bos]`.
fn codec_prefix(
    config: &Qwen3TtsConfig,
    language: &str,
    speaker: Option<SpeakerInput>,
) -> Result<Vec<CodecInput>, PromptError> {
    let t = &config.talker_config;
    let language = language.to_lowercase();
    let known = config.supported_languages();
    if !known.contains(&language.as_str()) {
        return Err(PromptError::UnknownLanguage(language, known.join(", ")));
    }
    let mut lang = (language != "auto").then(|| t.codec_language_id[&language]);
    // A dialect speaker speaks its dialect for Chinese and "auto" (spec 5.1).
    if let Some(SpeakerInput::Preset {
        dialect: Some(dialect),
        ..
    }) = &speaker
    {
        if let (true, Some(&id)) = (
            language == "chinese" || language == "auto",
            t.codec_language_id.get(dialect),
        ) {
            lang = Some(id);
        }
    }
    let start = match lang {
        Some(lang) => vec![
            t.codec_think_id,
            t.codec_think_bos_id,
            lang,
            t.codec_think_eos_id,
        ],
        None => vec![
            t.codec_nothink_id,
            t.codec_think_bos_id,
            t.codec_think_eos_id,
        ],
    };
    let mut codec: Vec<CodecInput> = start.into_iter().map(CodecInput::Id).collect();
    match speaker {
        Some(SpeakerInput::Preset { id, .. }) => codec.push(CodecInput::Id(id)),
        Some(SpeakerInput::XVector) => codec.push(CodecInput::XVector),
        _ => {}
    }
    codec.extend([
        CodecInput::Id(t.codec_pad_id),
        CodecInput::Id(t.codec_bos_id),
    ]);
    Ok(codec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn config(folder: &str) -> Qwen3TtsConfig {
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/qwen3_tts")
            .join(folder)
            .join("config.json");
        Qwen3TtsConfig::from_file(&file).unwrap()
    }

    /// Role, two text ids, tail.
    const TEXT: [u32; 10] = [
        151644, 77091, 198, 9707, 1879, 151645, 198, 151644, 77091, 198,
    ];

    fn input<'a>(voice: Voice<'a>, language: &'a str) -> PromptInput<'a> {
        PromptInput {
            text_ids: &TEXT,
            instruct_ids: None,
            language,
            voice,
            layout: TextLayout::NonStreaming,
        }
    }

    #[test]
    fn a_dialect_speaker_speaks_its_dialect_for_chinese_and_auto_only() {
        let cv = config("Qwen3-TTS-12Hz-1.7B-CustomVoice");
        let codec = |language| {
            layout(&cv, &input(Voice::Speaker("Eric"), language))
                .unwrap()
                .positions[3..8]
                .iter()
                .map(|p| p.codec)
                .collect::<Vec<_>>()
        };
        let id = |i| Some(CodecInput::Id(i));
        // think, think_bos, sichuan_dialect, think_eos, eric.
        let sichuan = [id(2154), id(2156), id(2062), id(2157), id(2875)];
        assert_eq!(codec("auto"), sichuan);
        assert_eq!(codec("Chinese"), sichuan);
        assert_eq!(codec("english")[2], id(2050));
    }

    #[test]
    fn bad_inputs_are_errors_that_say_what_is_wrong() {
        let cv = config("Qwen3-TTS-12Hz-1.7B-CustomVoice");
        let base = config("Qwen3-TTS-12Hz-0.6B-Base");
        let err = |c: &Qwen3TtsConfig, i: PromptInput<'_>| layout(c, &i).unwrap_err().to_string();
        assert!(err(&cv, input(Voice::Speaker("vivian"), "klingon"))
            .contains("unknown language \"klingon\""));
        assert!(err(&cv, input(Voice::Speaker("nobody"), "auto"))
            .contains("unknown speaker \"nobody\""));
        assert!(err(&cv, input(Voice::Designed, "auto")).contains("takes a preset speaker"));
        let short = PromptInput {
            text_ids: &TEXT[..8],
            ..input(Voice::Speaker("vivian"), "auto")
        };
        assert!(err(&cv, short).contains("holds 8 ids"));
        let mut voice = ClonedVoice {
            x_vector: vec![0.0; 7],
            reference: None,
        };
        assert!(err(&base, input(Voice::Cloned(&voice), "auto")).contains("x-vector has 7 values"));
        voice.x_vector = vec![0.0; 1024];
        voice.reference = Some(Reference {
            text_ids: vec![151644, 77091, 198, 151645, 198],
            codes: vec![vec![5; 16], vec![2048; 16]],
        });
        assert!(err(&base, input(Voice::Cloned(&voice), "auto")).contains("frame 1: code 2048"));
        voice.reference = None;
        let instructed = PromptInput {
            instruct_ids: Some(&TEXT),
            ..input(Voice::Cloned(&voice), "auto")
        };
        assert!(err(&base, instructed).contains("takes no instruction"));
        let unknown_id = PromptInput {
            instruct_ids: Some(&[200_000]),
            ..input(Voice::Speaker("vivian"), "auto")
        };
        assert!(err(&cv, unknown_id).contains("text id 200000"));
    }
}
