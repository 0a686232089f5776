#!/usr/bin/env python3
"""Voxtral Realtime goldens: the offline front end, the audio encoder and greedy decoding on a
random checkpoint.

Runs the references (imported from the installed wheels, never copied) on a 1 s synthetic
signal whose length is not a multiple of the hop (long enough that the decoded positions, 480 ms
behind the audio, see the signal and not only the right padding), and writes, under --out:

  padded.f32       mistral-common 1.13.1 offline padding (AudioEncoder.pad, streaming format)
  mel.f32          vLLM 0.33.0 `VoxtralEncoderModel.compute_whisper_melspec` on padded, [mels, frames]
  conv_stem.f32    transformers 5.23.0 VoxtralRealtime embedder (causal conv1, GELU, conv2, GELU), [frames/2, enc_dim]
  encoder.f32      its audio tower (layers + final norm), [frames/2, enc_dim]
  adapter.f32      its 4x frame stacking + projector, [frames/8, dim]
  logits.f32       its decoder's logits at every decoded position, greedy, [steps, vocab]
  case.json        sizes, prompt tokens (mistral-common encode_transcription), the greedy tokens
                   and their text (mistral-common Tekkenizer.decode), checkpoint sha256, and the
                   cross-checks between the references

Greedy decoding (spec section 6): the prompt prefills positions 0..len(prompt)-1; the output at
position p is argmax(logits[p]) and is fed at p + 1 with that position's audio embedding; it
stops after EOS or after the output of the last audio position (n_audio - len(prompt) + 1
outputs, as mlx-audio and the spec's oracle do). Each step is one full forward of transformers'
model, no cache. transformers' own `generate` (its caches) stops one token earlier, at
max_length = n_audio; its tokens are recorded as a cross-check.

All raw files are little-endian float32, row-major. The spec (docs/voxtral-realtime-spec.md
section 2) names vLLM's function as the mel reference; transformers' feature extractor is run
too and must agree with it. The checkpoint is converted to transformers' names at run time:
q/k rows permuted from Mistral's interleaved rotary layout to NeoX halves.
"""

import argparse
import ast
import hashlib
import json
import math
import pathlib
import sys
import types

import numpy as np
import torch

SAMPLE_RATE = 16000


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def synthetic_signal(n, seed):
    """A chirp, two harmonics and a little noise: energy in every mel band, bounded dynamic range."""
    t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
    chirp = 0.3 * np.sin(2 * np.pi * (150 * t + 0.5 * 9000 * t * t))
    tones = 0.2 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 3100 * t + 0.3)
    noise = 0.02 * np.random.default_rng(seed).standard_normal(n)
    return (chirp + tones + noise).astype(np.float32)


def vllm_melspec_function():
    """`VoxtralEncoderModel.compute_whisper_melspec` from the installed vLLM wheel's source.

    Importing vllm.model_executor.models.voxtral needs vLLM's CUDA stack, so the method is
    parsed out of the installed file and executed with torch alone.
    """
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    source_path = pathlib.Path(spec.submodule_search_locations[0]) / "model_executor/models/voxtral.py"
    tree = ast.parse(source_path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "VoxtralEncoderModel":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "compute_whisper_melspec":
                    module = ast.Module(body=[item], type_ignores=[])
                    namespace = {"torch": torch}
                    exec(compile(module, str(source_path), "exec"), namespace)
                    return namespace["compute_whisper_melspec"], str(source_path)
    sys.exit(f"compute_whisper_melspec not found in {source_path}")


def hf_config(params):
    from transformers import VoxtralRealtimeConfig

    enc = params["multimodal"]["whisper_model_args"]["encoder_args"]
    audio = enc["audio_encoding_args"]
    return VoxtralRealtimeConfig(
        audio_config=dict(
            hidden_size=enc["dim"],
            intermediate_size=enc["hidden_dim"],
            num_hidden_layers=enc["n_layers"],
            num_attention_heads=enc["n_heads"],
            num_key_value_heads=enc["n_kv_heads"],
            head_dim=enc["head_dim"],
            num_mel_bins=audio["num_mel_bins"],
            rms_norm_eps=enc["norm_eps"],
            sliding_window=enc["sliding_window"],
            rope_parameters={"rope_theta": enc["rope_theta"], "rope_type": "default"},
        ),
        text_config=dict(
            vocab_size=params["vocab_size"],
            hidden_size=params["dim"],
            intermediate_size=params["hidden_dim"],
            num_hidden_layers=params["n_layers"],
            num_attention_heads=params["n_heads"],
            num_key_value_heads=params["n_kv_heads"],
            head_dim=params["head_dim"],
            rms_norm_eps=params["norm_eps"],
            sliding_window=params["sliding_window"],
            rope_parameters={"rope_theta": params["rope_theta"], "rope_type": "default"},
        ),
        downsample_factor=params["multimodal"]["whisper_model_args"]["downsample_args"]["downsample_factor"],
    )


def interleaved_to_halves(w, n_heads):
    """Mistral's rotary pairs (2i, 2i+1) -> transformers' halves (i, i + d/2), per head."""
    rows = w.shape[0]
    d = rows // n_heads
    rest = w.shape[1:]
    return w.reshape(n_heads, d // 2, 2, *rest).transpose(1, 2).reshape(rows, *rest)


def hf_state_dict(weights, params):
    """Mistral key names -> transformers' VoxtralRealtimeForConditionalGeneration names."""
    enc = params["multimodal"]["whisper_model_args"]["encoder_args"]
    e = "mm_streams_embeddings.embedding_module."
    w = e + "whisper_encoder."
    out = {}
    for i, name in enumerate(["conv1", "conv2"]):
        for p in ["weight", "bias"]:
            out[f"model.audio_tower.embedder.{name}.{p}"] = weights[f"{w}conv_layers.{i}.conv.{p}"]
    for l in range(enc["n_layers"]):
        src, dst = f"{w}transformer.layers.{l}.", f"model.audio_tower.layers.{l}."
        heads = enc["n_heads"]
        out[dst + "self_attn_layer_norm.weight"] = weights[src + "attention_norm.weight"]
        out[dst + "final_layer_norm.weight"] = weights[src + "ffn_norm.weight"]
        out[dst + "self_attn.q_proj.weight"] = interleaved_to_halves(weights[src + "attention.wq.weight"], heads)
        out[dst + "self_attn.q_proj.bias"] = interleaved_to_halves(weights[src + "attention.wq.bias"], heads)
        out[dst + "self_attn.k_proj.weight"] = interleaved_to_halves(weights[src + "attention.wk.weight"], heads)
        out[dst + "self_attn.v_proj.weight"] = weights[src + "attention.wv.weight"]
        out[dst + "self_attn.v_proj.bias"] = weights[src + "attention.wv.bias"]
        out[dst + "self_attn.o_proj.weight"] = weights[src + "attention.wo.weight"]
        out[dst + "self_attn.o_proj.bias"] = weights[src + "attention.wo.bias"]
        out[dst + "mlp.gate_proj.weight"] = weights[src + "feed_forward.w1.weight"]
        out[dst + "mlp.up_proj.weight"] = weights[src + "feed_forward.w3.weight"]
        out[dst + "mlp.down_proj.weight"] = weights[src + "feed_forward.w2.weight"]
        out[dst + "mlp.down_proj.bias"] = weights[src + "feed_forward.w2.bias"]
    out["model.audio_tower.norm.weight"] = weights[w + "transformer.norm.weight"]
    out["model.multi_modal_projector.linear_1.weight"] = weights[e + "audio_language_projection.0.weight"]
    out["model.multi_modal_projector.linear_2.weight"] = weights[e + "audio_language_projection.2.weight"]
    out["model.language_model.embed_tokens.weight"] = weights[e + "tok_embeddings.weight"]
    out["lm_head.weight"] = weights[e + "tok_embeddings.weight"]
    for l in range(params["n_layers"]):
        src, dst = f"layers.{l}.", f"model.language_model.layers.{l}."
        out[dst + "input_layernorm.weight"] = weights[src + "attention_norm.weight"]
        out[dst + "post_attention_layernorm.weight"] = weights[src + "ffn_norm.weight"]
        out[dst + "self_attn.q_proj.weight"] = interleaved_to_halves(weights[src + "attention.wq.weight"], params["n_heads"])
        out[dst + "self_attn.k_proj.weight"] = interleaved_to_halves(weights[src + "attention.wk.weight"], params["n_kv_heads"])
        out[dst + "self_attn.v_proj.weight"] = weights[src + "attention.wv.weight"]
        out[dst + "self_attn.o_proj.weight"] = weights[src + "attention.wo.weight"]
        out[dst + "mlp.gate_proj.weight"] = weights[src + "feed_forward.w1.weight"]
        out[dst + "mlp.up_proj.weight"] = weights[src + "feed_forward.w3.weight"]
        out[dst + "mlp.down_proj.weight"] = weights[src + "feed_forward.w2.weight"]
        out[dst + "ada_rms_norm.linear1.weight"] = weights[src + "ada_rms_norm_t_cond.0.weight"]
        out[dst + "ada_rms_norm.linear2.weight"] = weights[src + "ada_rms_norm_t_cond.2.weight"]
    out["model.language_model.norm.weight"] = weights["norm.weight"]
    return out


def float64_mel(padded, filters, n_fft, hop, log_mel_max):
    """The same front end in float64 throughout (numpy's FFT): how far the f32 reference
    itself is from the exact values. Bands that read a single FFT bin of near-zero power show
    the reference's f32 FFT rounding."""
    x = np.pad(padded.astype(np.float64), n_fft // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = np.stack([x[t * hop : t * hop + n_fft] * window for t in range(len(padded) // hop)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    log_mel = np.log10(np.maximum(power @ filters.astype(np.float64), 1e-10)).T
    return (np.maximum(log_mel, log_mel_max - 8.0) + 4.0) / 4.0


def greedy(hf, features, prompt, audio_config, tokenizer):
    """Greedy decoding over the whole utterance (see the module docstring): the tokens and the
    logits `[steps, vocab]` that chose them."""
    n_audio = features.shape[-1] // audio_config.audio_length_per_tok
    eos = tokenizer.instruct_tokenizer.tokenizer.eos_id
    frames_per_token = hf.config.downsample_factor
    with torch.no_grad():
        # The conv stem once; each step's forward runs the causal encoder on the frames of the
        # positions it feeds (the same frames as the whole utterance's, the encoder being causal).
        stem = hf.model.audio_tower.embedder(features)
        tokens, rows = list(prompt), []
        while len(tokens) <= n_audio:
            out = hf(
                input_ids=torch.tensor([tokens]),
                encoder_inputs_embeds=stem[:, : len(tokens) * frames_per_token],
                num_delay_tokens=audio_config.get_num_delay_tokens(),
                use_cache=False,
            )
            rows.append(out.logits[0, -1])
            tokens.append(int(rows[-1].argmax()))
            if tokens[-1] == eos:
                break
    return tokens[len(prompt) :], torch.stack(rows)


def write_f32(path, array):
    np.ascontiguousarray(array, dtype="<f4").tofile(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a make-test-model --preset stt-tiny folder")
    ap.add_argument("--preset", default="stt-tiny")
    ap.add_argument("--seed", type=int, default=0, help="the make-test-model seed (recorded)")
    ap.add_argument("--samples", type=int, default=16010, help="signal length at 16 kHz")
    # Seed 2: see float64_mel; over seeds 0-11 the f32 reference is 5.7e-6..3.1e-5 off exact.
    ap.add_argument("--signal-seed", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    model = pathlib.Path(args.model)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    params = json.loads((model / "params.json").read_text())
    audio_args = params["multimodal"]["whisper_model_args"]["encoder_args"]["audio_encoding_args"]

    # mistral-common: the tokenizer's audio section, offline padding and the prompt.
    from mistral_common.protocol.instruct.chunk import RawAudio
    from mistral_common.protocol.transcription.request import StreamingMode, TranscriptionRequest
    from mistral_common.tokens.tokenizers.audio import Audio
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    tokenizer = MistralTokenizer.from_file(str(model / "tekken.json"))
    encoder = tokenizer.instruct_tokenizer.audio_encoder
    audio_config = encoder.audio_config
    signal = synthetic_signal(args.samples, args.signal_seed)
    padded = encoder.pad(signal.copy(), SAMPLE_RATE).astype(np.float32)
    left = audio_config.raw_audio_length_per_tok * audio_config.n_left_pad_tokens
    assert np.array_equal(padded[left : left + len(signal)], signal), "padding moved the signal"
    # The full request path (its audio makes a PCM16 WAV round trip, so only lengths are compared).
    wav = Audio(audio_array=signal, sampling_rate=SAMPLE_RATE, format="wav")
    request = TranscriptionRequest(
        audio=RawAudio(data=wav.to_base64("wav"), format="wav"),
        streaming=StreamingMode.OFFLINE,
        language=None,
    )
    tokenized = tokenizer.encode_transcription(request)
    assert len(tokenized.audios[0].audio_array) == len(padded), "request path pads differently"

    # vLLM: the mel front end (the spec's reference), on the padded signal.
    melspec, melspec_source = vllm_melspec_function()
    from mistral_common.audio import mel_filter_bank

    n_fft = audio_args["window_size"]
    encoder_self = types.SimpleNamespace(
        config=types.SimpleNamespace(
            window_size=n_fft,
            hop_length=audio_args["hop_length"],
            global_log_mel_max=audio_args["global_log_mel_max"],
        ),
        # As VoxtralEncoderModel.__init__ builds it.
        mel_filters=torch.tensor(
            mel_filter_bank(
                num_frequency_bins=1 + n_fft // 2,
                num_mel_bins=audio_args["num_mel_bins"],
                min_frequency=0.0,
                max_frequency=8000.0,
                sampling_rate=audio_args["sampling_rate"],
            ),
            dtype=torch.float32,
        ),
    )
    with torch.no_grad():
        mel = melspec(encoder_self, torch.from_numpy(padded))
    assert mel.shape == (audio_args["num_mel_bins"], len(padded) // audio_args["hop_length"]), mel.shape

    # transformers: its own feature extractor (second opinion) and the audio tower.
    from safetensors.torch import load_file
    from transformers import VoxtralRealtimeForConditionalGeneration
    from transformers.models.voxtral_realtime.feature_extraction_voxtral_realtime import (
        VoxtralRealtimeFeatureExtractor,
    )

    extractor = VoxtralRealtimeFeatureExtractor(
        feature_size=audio_args["num_mel_bins"],
        sampling_rate=audio_args["sampling_rate"],
        hop_length=audio_args["hop_length"],
        n_fft=n_fft,
        global_log_mel_max=audio_args["global_log_mel_max"],
    )
    hf_mel = extractor._torch_extract_fbank_features(torch.from_numpy(padded))
    mel_hf_vs_vllm = float((hf_mel - mel).abs().max())
    exact = float64_mel(padded, encoder_self.mel_filters.numpy(), n_fft, audio_args["hop_length"], audio_args["global_log_mel_max"])
    mel_vllm_vs_float64 = float(np.abs(exact - mel.numpy().astype(np.float64)).max())

    checkpoint = model / "consolidated.safetensors"
    weights = {k: v.to(torch.float32) for k, v in load_file(str(checkpoint)).items()}
    hf = VoxtralRealtimeForConditionalGeneration(hf_config(params))
    hf.config._attn_implementation = "eager"
    for sub in [hf.config.audio_config, hf.config.text_config]:
        sub._attn_implementation = "eager"
    hf.load_state_dict(hf_state_dict(weights, params), strict=True)
    hf.eval()
    with torch.no_grad():
        features = mel[None]
        conv_stem = hf.model.audio_tower.embedder(features)[0]
        outputs = hf.model.get_audio_features(input_features=features)
        encoder_out = outputs.last_hidden_state[0]
        adapter = outputs.pooler_output[0]

    greedy_tokens, logits = greedy(hf, features, tokenized.tokens, audio_config, tokenizer)
    with torch.no_grad():
        generated = hf.generate(
            input_ids=torch.tensor([tokenized.tokens]),
            input_features=features,
            num_delay_tokens=audio_config.get_num_delay_tokens(),
            do_sample=False,
        )[0, len(tokenized.tokens) :].tolist()
    hf_generate_agrees = generated == greedy_tokens[: len(generated)]
    assert hf_generate_agrees, f"generate {generated} vs greedy {greedy_tokens}"
    text = tokenizer.instruct_tokenizer.tokenizer.decode(greedy_tokens)

    write_f32(out / "padded.f32", padded)
    write_f32(out / "mel.f32", mel.numpy())
    write_f32(out / "conv_stem.f32", conv_stem.numpy())
    write_f32(out / "encoder.f32", encoder_out.numpy())
    write_f32(out / "adapter.f32", adapter.numpy())
    write_f32(out / "logits.f32", logits.numpy())

    import mistral_common
    import transformers

    case = {
        "preset": args.preset,
        "seed": args.seed,
        "checkpoint_sha256": sha256(checkpoint),
        "signal": {
            "samples": args.samples,
            "seed": args.signal_seed,
            "formula": "0.3 sin(2pi(150t + 4500t^2)) + 0.2 sin(2pi 440t) + 0.1 sin(2pi 3100t + 0.3) "
            "+ 0.02 N(0,1) [numpy default_rng(seed).standard_normal], float64 then float32",
        },
        "left_pad_samples": left,
        "padded_samples": len(padded),
        "mel_frames": mel.shape[1],
        "num_mel_bins": mel.shape[0],
        "conv_stem_shape": list(conv_stem.shape),
        "encoder_shape": list(encoder_out.shape),
        "adapter_shape": list(adapter.shape),
        "prompt_tokens": tokenized.tokens,
        "audio_tokens": len(padded) // audio_config.raw_audio_length_per_tok,
        "delay_tokens": audio_config.get_num_delay_tokens(),
        "right_pad_tokens": audio_config.n_right_pad_tokens(),
        "logits_shape": list(logits.shape),
        "greedy_tokens": greedy_tokens,
        "text": text,
        "hf_generate_tokens": generated,
        "crosschecks": {
            "hf_generate_equals_greedy_prefix": hf_generate_agrees,
            "mel_transformers_vs_vllm_max_abs": mel_hf_vs_vllm,
            "mel_vllm_vs_float64_max_abs": mel_vllm_vs_float64,
        },
        "references": {
            "padding_and_prompt": f"mistral-common {mistral_common.__version__}",
            "mel": f"vllm 0.33.0 VoxtralEncoderModel.compute_whisper_melspec ({pathlib.Path(melspec_source).name}), "
            "mel_filters as its __init__ builds them",
            "conv_stem_encoder_adapter": f"transformers {transformers.__version__} VoxtralRealtimeForConditionalGeneration, "
            "f32, eager attention",
            "logits_and_tokens": f"transformers {transformers.__version__} VoxtralRealtimeForConditionalGeneration.forward, "
            "one full forward per step, greedy; text by mistral-common Tekkenizer.decode",
            "torch": torch.__version__,
        },
    }
    (out / "case.json").write_text(json.dumps(case, indent=1) + "\n")
    print(json.dumps({k: case[k] for k in ["mel_frames", "adapter_shape", "greedy_tokens", "text", "crosschecks"]}))


if __name__ == "__main__":
    main()
