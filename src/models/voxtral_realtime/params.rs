//! `params.json` and the `audio` section of `tekken.json`, the two files that configure a
//! Voxtral Realtime folder. Structs mirror the JSON; [`Config::load`] validates them against
//! each other and derives the streaming constants (samples per token, delay, pads, look-ahead)
//! the way mistral-common 1.13.1 does (`AudioConfig`, `AudioEncoder._get_streaming_pad`), so
//! that none of them is hard-coded.

use crate::nn::decoder::DecoderDims;
use crate::nn::mistral_params::{self, parse, positive, Attention};
use crate::nn::LoadError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// params.json: the text decoder ([`mistral_params`]), then the audio encoder under
/// `multimodal`.
pub type ModelArgs = mistral_params::ModelArgs<MultimodalArgs>;

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct MultimodalArgs {
    pub whisper_model_args: WhisperModelArgs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct WhisperModelArgs {
    pub encoder_args: EncoderArgs,
    pub downsample_args: DownsampleArgs,
}

/// The causal Whisper-style audio encoder.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct EncoderArgs {
    pub dim: usize,
    pub n_layers: usize,
    pub head_dim: usize,
    pub hidden_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub use_biases: bool,
    pub rope_theta: f64,
    pub causal: bool,
    pub norm_eps: f64,
    #[serde(default = "defaults::rope")]
    pub pos_embed: String,
    #[serde(default = "defaults::swiglu")]
    pub ffn_type: String,
    #[serde(default = "defaults::rms_norm")]
    pub norm_type: String,
    #[serde(default)]
    pub sliding_window: Option<usize>,
    #[serde(default)]
    pub max_source_positions: Option<usize>,
    pub audio_encoding_args: AudioEncodingArgs,
}

/// The mel front end as params.json states it.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct AudioEncodingArgs {
    pub sampling_rate: u32,
    pub frame_rate: f64,
    pub num_mel_bins: usize,
    pub hop_length: usize,
    pub window_size: usize,
    #[serde(default)]
    pub chunk_length_s: Option<f64>,
    /// Fixed log-mel ceiling; `None` uses each call's own maximum (vLLM's fallback).
    #[serde(default)]
    pub global_log_mel_max: Option<f64>,
    #[serde(default)]
    pub transcription_format: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct DownsampleArgs {
    pub downsample_factor: usize,
}

/// `tekken.json` → `audio` (mistral-common's `AudioConfig`).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct TekkenAudio {
    pub sampling_rate: u32,
    pub frame_rate: f64,
    pub audio_encoding_config: AudioSpectrogramConfig,
    #[serde(default)]
    pub chunk_length_s: Option<f64>,
    #[serde(default)]
    pub transcription_format: Option<String>,
    #[serde(default)]
    pub transcription_delay_ms: Option<f64>,
    #[serde(default)]
    pub streaming_look_ahead_ms: Option<f64>,
    #[serde(default)]
    pub streaming_look_back_ms: Option<f64>,
    #[serde(default)]
    pub streaming_n_left_pad_tokens: Option<usize>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct AudioSpectrogramConfig {
    pub num_mel_bins: usize,
    pub hop_length: usize,
    pub window_size: usize,
}

mod defaults {
    pub fn rope() -> String {
        "rope".into()
    }
    pub fn swiglu() -> String {
        "swiglu".into()
    }
    pub fn rms_norm() -> String {
        "rms_norm".into()
    }
}

/// mistral-common's `OFFLINE_STREAMING_BUFFER_TOKENS`: right-pad tokens beyond the delay and
/// the BOS, room for the longest word to come out after the audio ends. A code constant of
/// the reference, in neither file.
pub const OFFLINE_STREAMING_BUFFER_TOKENS: usize = 10;

/// The log-mel front end (vLLM `compute_whisper_melspec`).
#[derive(Clone, Debug, PartialEq)]
pub struct MelSettings {
    pub sample_rate: u32,
    pub n_fft: usize,
    pub hop_length: usize,
    pub num_mel_bins: usize,
    pub global_log_mel_max: Option<f64>,
}

/// Streaming constants in samples and tokens, derived from tekken.json's `audio`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Streaming {
    /// Audio samples per decoder position (80 ms: 1280 at 16 kHz).
    pub samples_per_token: usize,
    /// Mel frames per decoder position (8).
    pub mel_frames_per_token: usize,
    /// Decoder positions of the transcription delay (480 ms: 6).
    pub delay_tokens: usize,
    /// Silent tokens before the audio (32).
    pub left_pad_tokens: usize,
    /// Silent tokens after the audio, offline: delay + BOS + buffer (17).
    pub right_pad_tokens: usize,
    /// Samples past a token's frame its last mel frame reads (2.5 ms: 40).
    pub look_ahead_samples: usize,
    /// Samples before a realtime segment that vLLM re-reads (52.5 ms: 840).
    pub look_back_samples: usize,
}

impl Streaming {
    /// Prompt length: BOS, then a streaming pad per left-pad and per delay token (39).
    pub fn prompt_len(&self) -> usize {
        1 + self.left_pad_tokens + self.delay_tokens
    }

    /// Decoder positions an utterance of `samples` takes once padded offline
    /// ([`pad_offline`](Self::pad_offline)).
    pub fn offline_positions(&self, samples: usize) -> usize {
        self.left_pad_tokens + samples.div_ceil(self.samples_per_token) + self.right_pad_tokens
    }

    /// mistral-common's offline padding (`AudioEncoder.pad` in streaming format): the left-pad
    /// tokens of silence, the audio, silence up to a whole token, then the right-pad tokens.
    pub fn pad_offline(&self, audio: &[f32]) -> Vec<f32> {
        let token = self.samples_per_token;
        let left = self.left_pad_tokens * token;
        let align = (token - audio.len() % token) % token;
        let right = align + self.right_pad_tokens * token;
        let mut padded = vec![0.0; left + audio.len() + right];
        padded[left..left + audio.len()].copy_from_slice(audio);
        padded
    }
}

/// The encoder's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderDims {
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub hidden_dim: usize,
    pub norm_eps: f64,
    pub rope_theta: f64,
    /// Frames each frame attends to, itself included.
    pub sliding_window: Option<usize>,
    pub downsample_factor: usize,
}

/// A validated Voxtral Realtime configuration with the derived constants.
#[derive(Clone, Debug)]
pub struct Config {
    pub args: ModelArgs,
    pub tekken_audio: TekkenAudio,
    pub mel: MelSettings,
    pub streaming: Streaming,
    pub encoder: EncoderDims,
    /// Width of the time conditioning's bottleneck (`ada_rms_norm_t_cond_dim`).
    pub t_cond_dim: usize,
}

impl Config {
    /// Reads `params.json` and `tekken.json` from a model folder.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path)
                .map(|text| (text, path.display().to_string()))
                .map_err(|e| LoadError::io(&path, e))
        };
        let (params, params_file) = read("params.json")?;
        let (tekken, tekken_file) = read("tekken.json")?;
        Self::from_json(&params, &params_file, &tekken, &tekken_file)
    }

    pub fn from_json(
        params: &str,
        params_file: &str,
        tekken: &str,
        tekken_file: &str,
    ) -> Result<Self, LoadError> {
        let args: ModelArgs = parse(params, params_file)?;
        #[derive(Deserialize)]
        struct TekkenFile {
            audio: Option<serde_json::Value>,
        }
        let file: TekkenFile = parse(tekken, tekken_file)?;
        let Some(audio) = file.audio else {
            return Err(LoadError::invalid(
                tekken_file,
                "audio",
                "missing: a Voxtral Realtime tokenizer has an audio section",
            ));
        };
        let tekken_audio: TekkenAudio = serde_path_to_error::deserialize(audio).map_err(|e| {
            let key = match e.path().to_string().as_str() {
                "." | "?" => "audio".to_string(),
                path => format!("audio.{path}"),
            };
            LoadError::invalid(tekken_file, key, e.inner().to_string())
        })?;
        Self::from_parts(args, params_file, tekken_audio, tekken_file)
    }

    pub fn from_parts(
        args: ModelArgs,
        params_file: &str,
        tekken_audio: TekkenAudio,
        tekken_file: &str,
    ) -> Result<Self, LoadError> {
        let bad = |key: &str, msg: String| LoadError::invalid(params_file, key, msg);
        args.check_decoder(params_file)?;
        if !args.causal {
            return Err(bad("causal", "the text decoder must be causal".into()));
        }
        if !args.ada_rms_norm_t_cond {
            return Err(bad(
                "ada_rms_norm_t_cond",
                "must be true: Voxtral Realtime conditions every layer on the delay".into(),
            ));
        }
        let t_cond_dim = match args.ada_rms_norm_t_cond_dim {
            Some(d) if d > 0 => d,
            _ => return Err(bad("ada_rms_norm_t_cond_dim", "must be > 0".into())),
        };
        if !args.dim.is_multiple_of(2) {
            return Err(bad(
                "dim",
                "must be even (the time embedding is cos|sin halves)".into(),
            ));
        }
        if args.sliding_window == Some(0) {
            return Err(bad("sliding_window", "must be > 0".into()));
        }

        let w = &args.multimodal.whisper_model_args;
        let e = &w.encoder_args;
        let ep = "multimodal.whisper_model_args.encoder_args";
        encoder_attention(e).check(params_file, &format!("{ep}."))?;
        if !e.causal {
            return Err(bad(
                &format!("{ep}.causal"),
                "only the causal encoder is supported".into(),
            ));
        }
        if !e.use_biases {
            return Err(bad(
                &format!("{ep}.use_biases"),
                "must be true: the encoder's wq, wv, wo and w2 have biases".into(),
            ));
        }
        if e.n_kv_heads != e.n_heads {
            return Err(bad(
                &format!("{ep}.n_kv_heads"),
                "must equal n_heads (no GQA in the encoder)".into(),
            ));
        }
        for (key, value, want) in [
            ("pos_embed", &e.pos_embed, "rope"),
            ("ffn_type", &e.ffn_type, "swiglu"),
            ("norm_type", &e.norm_type, "rms_norm"),
        ] {
            if value != want {
                return Err(bad(
                    &format!("{ep}.{key}"),
                    format!("{value:?}; only {want:?} is supported"),
                ));
            }
        }
        if e.sliding_window == Some(0) {
            return Err(bad(&format!("{ep}.sliding_window"), "must be > 0".into()));
        }
        let factor = w.downsample_args.downsample_factor;
        if factor == 0 {
            return Err(bad(
                "multimodal.whisper_model_args.downsample_args.downsample_factor",
                "must be > 0".into(),
            ));
        }

        let mel = mel_settings(
            &e.audio_encoding_args,
            params_file,
            &format!("{ep}.audio_encoding_args"),
        )?;
        let streaming = streaming(&tekken_audio, tekken_file)?;
        check_agreement(
            &e.audio_encoding_args,
            &tekken_audio,
            params_file,
            tekken_file,
        )?;
        // Two stride-1/stride-2 convs halve the mel rate; the adapter stacks `factor` frames.
        if streaming.mel_frames_per_token != 2 * factor {
            return Err(bad(
                "multimodal.whisper_model_args.downsample_args.downsample_factor",
                format!(
                    "{factor}: the conv stem halves the mel rate, so one token's {} mel frames need a \
                     factor of {}",
                    streaming.mel_frames_per_token,
                    streaming.mel_frames_per_token / 2
                ),
            ));
        }

        Ok(Config {
            encoder: EncoderDims {
                dim: e.dim,
                n_layers: e.n_layers,
                n_heads: e.n_heads,
                head_dim: e.head_dim,
                hidden_dim: e.hidden_dim,
                norm_eps: e.norm_eps,
                rope_theta: e.rope_theta,
                sliding_window: e.sliding_window,
                downsample_factor: factor,
            },
            mel,
            streaming,
            t_cond_dim,
            tekken_audio,
            args,
        })
    }

    /// The text decoder's sizes; `max_positions` is a KV slot's length.
    pub fn decoder_dims(&self, max_positions: usize) -> DecoderDims {
        self.args.decoder_dims(max_positions)
    }
}

fn encoder_attention(e: &EncoderArgs) -> Attention {
    Attention {
        dim: e.dim,
        n_layers: e.n_layers,
        head_dim: e.head_dim,
        hidden_dim: e.hidden_dim,
        n_heads: e.n_heads,
        n_kv_heads: e.n_kv_heads,
        norm_eps: e.norm_eps,
        rope_theta: e.rope_theta,
    }
}

fn mel_settings(a: &AudioEncodingArgs, file: &str, prefix: &str) -> Result<MelSettings, LoadError> {
    let bad = |key: &str, msg: String| LoadError::invalid(file, format!("{prefix}.{key}"), msg);
    if a.sampling_rate == 0 {
        return Err(bad("sampling_rate", "must be > 0".into()));
    }
    if a.num_mel_bins == 0 || a.hop_length == 0 {
        return Err(bad(
            "num_mel_bins",
            "mel bins and hop_length must be > 0".into(),
        ));
    }
    // The STFT centres frames with a reflect pad of n_fft / 2 on each side.
    if a.window_size < 2 || !a.window_size.is_multiple_of(2) {
        return Err(bad(
            "window_size",
            format!("{}: must be even and >= 2", a.window_size),
        ));
    }
    if let Some(max) = a.global_log_mel_max {
        if !max.is_finite() {
            return Err(bad("global_log_mel_max", "must be finite".into()));
        }
    }
    if a.chunk_length_s.is_some() {
        return Err(bad(
            "chunk_length_s",
            "must be null: streaming audio is not chunked".into(),
        ));
    }
    if a.transcription_format
        .as_deref()
        .is_some_and(|f| f != "streaming")
    {
        return Err(bad(
            "transcription_format",
            format!(
                "{:?}; only \"streaming\" is supported",
                a.transcription_format
            ),
        ));
    }
    Ok(MelSettings {
        sample_rate: a.sampling_rate,
        n_fft: a.window_size,
        hop_length: a.hop_length,
        num_mel_bins: a.num_mel_bins,
        global_log_mel_max: a.global_log_mel_max,
    })
}

/// `ms` milliseconds at `rate` as a whole number of samples, or `None`.
fn whole_samples(ms: f64, rate: u32) -> Option<usize> {
    // Multiplied first: 52.5 ms at 16 kHz is exactly 840 samples this way.
    let samples = ms * rate as f64 / 1000.0;
    (ms >= 0.0 && samples.is_finite() && samples.fract() == 0.0).then_some(samples as usize)
}

fn streaming(a: &TekkenAudio, file: &str) -> Result<Streaming, LoadError> {
    let bad = |key: &str, msg: String| LoadError::invalid(file, format!("audio.{key}"), msg);
    let hop = a.audio_encoding_config.hop_length;
    if a.sampling_rate == 0 || hop == 0 {
        return Err(bad(
            "sampling_rate",
            "sampling_rate and hop_length must be > 0".into(),
        ));
    }
    if a.transcription_format.as_deref() != Some("streaming") {
        return Err(bad(
            "transcription_format",
            format!(
                "{:?}: a Voxtral Realtime tokenizer is \"streaming\"",
                a.transcription_format
            ),
        ));
    }
    // mistral-common: raw_audio_length_per_tok = sampling_rate // frame_rate.
    let per_token = a.sampling_rate as f64 / a.frame_rate;
    if !positive(a.frame_rate)
        || per_token.fract() != 0.0
        || !(per_token as usize).is_multiple_of(hop)
    {
        return Err(bad(
            "frame_rate",
            format!(
                "{}: sampling_rate / frame_rate must be a whole number of hops ({hop} samples)",
                a.frame_rate
            ),
        ));
    }
    let samples_per_token = per_token as usize;
    let mel_frames_per_token = samples_per_token / hop;
    let required = |key: &str, v: Option<f64>| {
        v.ok_or_else(|| bad(key, "missing: required in streaming format".into()))
    };
    let delay_ms = required("transcription_delay_ms", a.transcription_delay_ms)?;
    let delay_samples = whole_samples(delay_ms, a.sampling_rate)
        .filter(|&s| s > 0 && s.is_multiple_of(samples_per_token))
        .ok_or_else(|| {
            bad(
                "transcription_delay_ms",
                format!(
                    "{delay_ms}: must be a positive multiple of a token ({} ms)",
                    1000.0 / a.frame_rate
                ),
            )
        })?;
    let look_ahead_ms = required("streaming_look_ahead_ms", a.streaming_look_ahead_ms)?;
    let look_ahead_samples = whole_samples(look_ahead_ms, a.sampling_rate).ok_or_else(|| {
        bad(
            "streaming_look_ahead_ms",
            format!("{look_ahead_ms}: not a whole number of samples"),
        )
    })?;
    let look_back_ms = required("streaming_look_back_ms", a.streaming_look_back_ms)?;
    let look_back_samples = whole_samples(look_back_ms, a.sampling_rate).ok_or_else(|| {
        bad(
            "streaming_look_back_ms",
            format!("{look_back_ms}: not a whole number of samples"),
        )
    })?;
    let left_pad_tokens = a.streaming_n_left_pad_tokens.ok_or_else(|| {
        bad(
            "streaming_n_left_pad_tokens",
            "missing: required in streaming format".into(),
        )
    })?;
    if a.chunk_length_s.is_some() {
        return Err(bad(
            "chunk_length_s",
            "must be null in streaming format".into(),
        ));
    }
    let delay_tokens = delay_samples / samples_per_token;
    Ok(Streaming {
        samples_per_token,
        mel_frames_per_token,
        delay_tokens,
        left_pad_tokens,
        right_pad_tokens: delay_tokens + 1 + OFFLINE_STREAMING_BUFFER_TOKENS,
        look_ahead_samples,
        look_back_samples,
    })
}

/// params.json and tekken.json describe the same front end twice; they must agree.
fn check_agreement(
    p: &AudioEncodingArgs,
    t: &TekkenAudio,
    params_file: &str,
    tekken_file: &str,
) -> Result<(), LoadError> {
    let c = &t.audio_encoding_config;
    let pairs: [(&str, f64, f64); 5] = [
        (
            "sampling_rate",
            p.sampling_rate as f64,
            t.sampling_rate as f64,
        ),
        ("frame_rate", p.frame_rate, t.frame_rate),
        ("num_mel_bins", p.num_mel_bins as f64, c.num_mel_bins as f64),
        ("hop_length", p.hop_length as f64, c.hop_length as f64),
        ("window_size", p.window_size as f64, c.window_size as f64),
    ];
    for (key, in_params, in_tekken) in pairs {
        if in_params != in_tekken {
            return Err(LoadError::invalid(
                params_file,
                format!("multimodal.whisper_model_args.encoder_args.audio_encoding_args.{key}"),
                format!("{in_params}, but {tekken_file} says {in_tekken}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published values (spec §1).
    const PARAMS: &str = r#"{"dim": 3072, "n_layers": 26, "head_dim": 128, "hidden_dim": 9216,
      "n_heads": 32, "n_kv_heads": 8, "use_biases": false, "causal": true, "rope_theta": 1000000.0,
      "norm_eps": 1e-05, "vocab_size": 131072, "model_max_length": 131072, "tied_embeddings": true,
      "sliding_window": 8192, "ada_rms_norm_t_cond": true, "ada_rms_norm_t_cond_dim": 32,
      "multimodal": {"whisper_model_args": {"encoder_args": {"dim": 1280, "n_layers": 32,
        "head_dim": 64, "hidden_dim": 5120, "n_heads": 32, "n_kv_heads": 32, "use_biases": true,
        "rope_theta": 1000000.0, "causal": true, "norm_eps": 1e-05, "pos_embed": "rope",
        "ffn_type": "swiglu", "norm_type": "rms_norm", "sliding_window": 750,
        "max_source_positions": null, "audio_encoding_args": {"sampling_rate": 16000,
          "frame_rate": 12.5, "num_mel_bins": 128, "hop_length": 160, "window_size": 400,
          "chunk_length_s": null, "global_log_mel_max": 1.5, "transcription_format": "streaming"}},
        "downsample_args": {"downsample_factor": 4}}}}"#;

    const TEKKEN: &str = r#"{"config": {}, "audio": {"sampling_rate": 16000, "frame_rate": 12.5,
      "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
      "chunk_length_s": null, "transcription_format": "streaming", "transcription_delay_ms": 480,
      "streaming_look_ahead_ms": 2.5, "streaming_look_back_ms": 52.5,
      "streaming_n_left_pad_tokens": 32}}"#;

    fn load(params: &str, tekken: &str) -> Result<Config, LoadError> {
        Config::from_json(params, "params.json", tekken, "tekken.json")
    }

    fn error(params: &str, tekken: &str) -> String {
        load(params, tekken).unwrap_err().to_string()
    }

    #[test]
    fn published_files_give_the_spec_constants() {
        let c = load(PARAMS, TEKKEN).unwrap();
        assert_eq!(
            c.streaming,
            Streaming {
                samples_per_token: 1280,
                mel_frames_per_token: 8,
                delay_tokens: 6,
                left_pad_tokens: 32,
                right_pad_tokens: 17,
                look_ahead_samples: 40,
                look_back_samples: 840,
            }
        );
        assert_eq!(c.streaming.prompt_len(), 39);
        assert_eq!(
            c.mel,
            MelSettings {
                sample_rate: 16000,
                n_fft: 400,
                hop_length: 160,
                num_mel_bins: 128,
                global_log_mel_max: Some(1.5),
            }
        );
        assert_eq!(c.encoder.n_heads * c.encoder.head_dim, 2048);
        assert_eq!(c.encoder.sliding_window, Some(750));
        assert_eq!(c.encoder.downsample_factor, 4);
        assert_eq!(c.t_cond_dim, 32);
        assert_eq!(c.decoder_dims(8192).n_kv_heads, 8);
    }

    #[test]
    fn delay_and_pads_come_from_tekken_json() {
        let tekken = TEKKEN
            .replace(
                "\"transcription_delay_ms\": 480",
                "\"transcription_delay_ms\": 960",
            )
            .replace(
                "\"streaming_n_left_pad_tokens\": 32",
                "\"streaming_n_left_pad_tokens\": 4",
            );
        let c = load(PARAMS, &tekken).unwrap();
        assert_eq!(c.streaming.delay_tokens, 12);
        assert_eq!(c.streaming.right_pad_tokens, 23);
        assert_eq!(c.streaming.prompt_len(), 17);
        // Offline padding: left pad, the audio, silence to a whole token, then the right pad.
        let padded = c.streaming.pad_offline(&[1.0; 1281]);
        assert_eq!(padded.len(), 4 * 1280 + 2 * 1280 + 23 * 1280);
        assert_eq!(c.streaming.offline_positions(1281), padded.len() / 1280);
        assert_eq!(padded[4 * 1280..4 * 1280 + 1281], [1.0; 1281]);
        assert!(padded[..4 * 1280]
            .iter()
            .chain(&padded[4 * 1280 + 1281..])
            .all(|&x| x == 0.0));
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let cases = [
            (
                error(PARAMS, &TEKKEN.replace("480", "500")),
                "tekken.json: audio.transcription_delay_ms",
            ),
            (
                error(PARAMS, &TEKKEN.replace("\"streaming_look_ahead_ms\": 2.5,", "")),
                "tekken.json: audio.streaming_look_ahead_ms",
            ),
            (
                error(PARAMS, &TEKKEN.replace("\"frame_rate\": 12.5", "\"frame_rate\": 12.0")),
                "tekken.json: audio.frame_rate",
            ),
            (error(PARAMS, r#"{"config": {}}"#), "tekken.json: audio"),
            (
                error(PARAMS, &TEKKEN.replace("\"hop_length\": 160", "\"hop_length\": \"x\"")),
                "tekken.json: audio.audio_encoding_config.hop_length",
            ),
            (
                error(&PARAMS.replace("\"num_mel_bins\": 128", "\"num_mel_bins\": 80"), TEKKEN),
                "params.json: multimodal.whisper_model_args.encoder_args.audio_encoding_args.num_mel_bins",
            ),
            (
                error(&PARAMS.replace("\"downsample_factor\": 4", "\"downsample_factor\": 2"), TEKKEN),
                "params.json: multimodal.whisper_model_args.downsample_args.downsample_factor",
            ),
            (
                error(&PARAMS.replace("\"n_kv_heads\": 8", "\"n_kv_heads\": 5"), TEKKEN),
                "params.json: n_kv_heads",
            ),
            (
                error(&PARAMS.replace("\"ada_rms_norm_t_cond\": true", "\"ada_rms_norm_t_cond\": false"), TEKKEN),
                "params.json: ada_rms_norm_t_cond",
            ),
            (
                error(&PARAMS.replace("\"hidden_dim\": 5120,", ""), TEKKEN),
                "params.json: multimodal.whisper_model_args.encoder_args",
            ),
            (error("{", TEKKEN), "params.json: (json)"),
        ];
        for (err, want) in cases {
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        }
    }
}
