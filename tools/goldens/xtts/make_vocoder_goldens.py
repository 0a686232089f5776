"""Goldens for XTTS-v2's speaker encoder and HiFi-GAN decoder (tests/it/parity_xtts_vocoder.rs).

Loads the project's random `hifigan_decoder.*` checkpoint (src/models/xtts/testkit/vocoder.rs) into
coqui-tts 0.28.0's own `HifiDecoder`, built as `Xtts.init_models` builds it for the published
config, and records what it computes:

- `clip_16k`: a deterministic 1 s voiced clip at 16 kHz (the speaker encoder's input rate);
- `spk_logmel` [64, frames]: the speaker front end (pre-emphasis, Hamming mel, log(x + 1e-6));
- `speaker_embedding` [512]: `speaker_encoder.forward(clip, l2_norm=True)`, as
  `Xtts.get_speaker_embedding` calls it;
- `latents_<n>` [1, n, D] (seeded normals) and `wav_<n>`: `HifiDecoder(latents, g=embedding)`;
- `latents_speed`: the last latents stretched for speed 1.3 as `Xtts.inference` does.

Run with the reference venv (references-on-cpu.md), on the checkpoint the Rust test names
when its fingerprint does not match:

    .deps/xtts-ref-venv/bin/python tools/goldens/xtts/make_vocoder_goldens.py \
        target/test-models/<digest>/xtts-vocoder-1024-<seed>/model.safetensors
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from TTS.tts.layers.xtts.hifigan_decoder import HifiDecoder

OUT = Path(__file__).resolve().parents[3] / "tests/goldens/xtts/vocoder"
PREFIX = "hifigan_decoder."
LATENT_FRAMES = (6, 7)
SPEED = 1.3


def voiced_clip(seconds=1.0, rate=16000):
    """A gliding 110-190 Hz harmonic tone with a syllable envelope and a little noise."""
    t = np.arange(int(seconds * rate)) / rate
    f0 = 150 + 40 * np.sin(2 * np.pi * 1.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(h * phase) / h for h in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3.0 * t) ** 2
    noise = np.random.default_rng(7).standard_normal(t.shape) * 0.01
    return (0.3 * voice * envelope + noise).astype(np.float32)


def main(checkpoint):
    torch.manual_seed(0)
    state = load_file(checkpoint)
    state = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
    dim = state["waveform_decoder.conv_pre.weight"].shape[1]
    # Xtts.init_models with the published config's model_args.
    decoder = HifiDecoder(
        input_sample_rate=22050,
        output_sample_rate=24000,
        output_hop_length=256,
        ar_mel_length_compression=1024,
        decoder_input_dim=dim,
        d_vector_dim=512,
        cond_d_vector_in_each_upsampling_layer=True,
    )
    decoder.load_state_dict(state, strict=True)
    decoder.eval()

    out = {}
    clip = torch.from_numpy(voiced_clip())
    out["clip_16k"] = clip
    encoder = decoder.speaker_encoder
    with torch.inference_mode():
        spec = encoder.torch_spec(clip[None].clone())
        out["spk_logmel"] = (spec + 1e-6).log()[0]
        embedding = encoder.forward(clip[None, None].clone(), l2_norm=True)
        out["speaker_embedding"] = embedding[0]
        g = embedding.unsqueeze(-1)
        generator = torch.Generator().manual_seed(20240917)
        for frames in LATENT_FRAMES:
            latents = torch.randn(1, frames, dim, generator=generator)
            out[f"latents_{frames}"] = latents
            out[f"wav_{frames}"] = decoder(latents, g=g).squeeze()
        # Xtts.inference's speed stretch of the latents, before HifiDecoder.
        length_scale = 1.0 / max(SPEED, 0.05)
        stretched = torch.nn.functional.interpolate(
            out[f"latents_{LATENT_FRAMES[-1]}"].transpose(1, 2), scale_factor=length_scale, mode="linear"
        ).transpose(1, 2)
        out["latents_speed"] = stretched

    out = {k: v.contiguous().float() for k, v in out.items()}
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(out, OUT / "goldens.safetensors")
    meta = {
        "checkpoint": Path(checkpoint).parent.name,
        "decoder_input_dim": dim,
        # Sum of conv_pre's weight, in f64: which random checkpoint these goldens are for.
        "fingerprint": float(state["waveform_decoder.conv_pre.weight"].double().sum()),
        "latent_frames": list(LATENT_FRAMES),
        "speed": SPEED,
        "wav_std": {f: float(out[f"wav_{f}"].std()) for f in LATENT_FRAMES},
    }
    (OUT / "goldens.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta, indent=1))
    for k, v in out.items():
        print(k, tuple(v.shape), float(v.abs().max()))
    assert all(math.isfinite(float(v.abs().max())) for v in out.values())


if __name__ == "__main__":
    main(sys.argv[1])
