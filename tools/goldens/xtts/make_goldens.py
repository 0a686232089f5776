"""XTTS-v2 GPT goldens from coqui-tts 0.28.0 on a `make-test-model --preset xtts-tiny` folder.

    PY=.deps/xtts-ref-venv/bin/python   # coqui-tts 0.28.0, torch 2.11.0 (references-on-cpu.md)
    cargo run --features testkit --bin make-test-model -- --preset xtts-tiny --out target/xtts-tiny
    $PY tools/goldens/xtts/make_goldens.py --model target/xtts-tiny --seed 0 --out tests/goldens/xtts

The folder is loaded as coqui's loader would load its `model.pth`: `XttsConfig.load_json`,
`Xtts(config)`, the tokenizer from `vocab.json`, `init_models`, then the state dict (read from
`model.safetensors`, which holds the keys `convert` writes) and `init_gpt_for_inference`. The
vocoder and speaker encoder (`hifigan_decoder.*`) are left out: nothing here runs them, and the
folder's are narrower than coqui's hard-coded widths, so coqui could not load them.

The goldens were made when the folder held the GPT half only; `checkpoint_sha256` is that
file's hash, which tests/it/parity_xtts.rs checks against `models::xtts::testkit::write_gpt_checkpoint`.
A new run must record that file's hash, not the folder's `model.safetensors`.

Everything runs through the reference's own functions, in float32 on the CPU:
- the reference clip, a deterministic 22.05 kHz PCM16 WAV written here (`ref_22k.wav`), and a
  second one at 24 kHz in stereo (`ref_24k_stereo.wav`), read by `load_audio` (the torchaudio
  reader swapped for the `wave` module, same int16/32768 scaling: torchaudio 2.11 reads
  through torchcodec, which is not installed): the second's mono mix, 24 -> 22.05 kHz
  resampling and clipping;
- `get_conditioning_latents` over both files with `sound_norm_refs` (each cut, normalised,
  concatenated);
- `get_gpt_cond_latents` at the config's 30 s / 4 s chunks (two chunks here) and at the
  function's 6 s / 6 s defaults (one chunk); the last chunk's cloning mel and
  conditioning-encoder output, seen by forward hooks;
- `GPT.generate` with fixed text ids (no tokenizer involved), as `Xtts.inference` calls it:
  greedy with the config's repetition penalty (stops by itself), greedy cut by
  `max_new_tokens`, and sampled with the config's temperature/top-k/top-p, `torch.multinomial`
  replaced by inverse-CDF sampling on recorded uniforms (token = first i with
  cumsum(p)[i] > u * sum(p), float64 over the float32 probabilities, one uniform per step);
- the GPT latents of each case as `Xtts.inference` computes them (the second GPT pass with
  `return_latent=True`).
"""

import argparse
import hashlib
import json
import wave
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import TTS.tts.models.xtts as xtts_mod
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer
from TTS.tts.models.xtts import Xtts

SAMPLE_RATE = 22050
CLIP_SECONDS = 4.6
# Text ids fed to the GPT as `Xtts.inference` would after the tokenizer ([START]/[STOP] are
# added by the GPT itself). Any ids below the vocabulary size do.
TEXT_IDS = [65, 70, 2, 31, 48, 17, 64, 2, 22, 55, 12, 2, 9, 40, 8, 28, 3]
MAX_NEW_TOKENS = 9
SAMPLING_SEED = 20251125


def reference_clip(path):
    """A voiced synthetic clip: a gliding harmonic source with a few formant-like partials,
    amplitude modulation and a little seeded noise, as PCM16."""
    n = int(CLIP_SECONDS * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    x = sum(np.sin(k * phase) / k * (1 + 0.5 * np.sin(2 * np.pi * 0.3 * k * t)) for k in range(1, 16))
    x *= 0.5 + 0.5 * np.abs(np.sin(2 * np.pi * 2.1 * t))
    x += 0.02 * np.random.default_rng(7).standard_normal(n)
    pcm = np.round(x / np.abs(x).max() * 0.6 * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())


def second_clip(path):
    """A 24 kHz stereo PCM16 clip (different in each channel), for `load_audio`'s mono mix,
    24 -> 22.05 kHz resampling and clipping, and for cloning from two files."""
    rate, n = 24000, int(0.8 * 24000)
    t = np.arange(n) / rate
    left = 0.5 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.3 * t)
    right = 0.4 * np.sin(2 * np.pi * 330 * t + 0.5) + 0.05 * np.random.default_rng(11).standard_normal(n)
    pcm = np.round(np.stack([left, right], axis=1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def read_wav(path):
    """torchaudio.load's result for a PCM16 WAV: float32 [channels, samples], int16 / 32768."""
    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").reshape(-1, w.getnchannels())
        return torch.from_numpy(data.T.astype(np.float32) / 32768.0), w.getframerate()


def load_model(folder):
    config = XttsConfig()
    config.load_json(str(folder / "config.json"))
    model = Xtts(config)
    model.tokenizer = VoiceBpeTokenizer(vocab_file=str(folder / "vocab.json"))
    model.init_models()
    state = {
        k: v
        for k, v in load_file(str(folder / "model.safetensors")).items()
        if not k.startswith("hifigan_decoder.")
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    left = [k for k in missing if not k.startswith("hifigan_decoder.")]
    assert not left, f"the folder lacks GPT keys: {left}"
    model.gpt.init_gpt_for_inference(kv_cache=model.args.kv_cache)
    model.eval()
    return model


class Hooks:
    """The last call's input/output of the cloning mel and the conditioning encoder."""

    def __init__(self, model):
        self.mel = None
        self.encoder = None
        original = xtts_mod.wav_to_mel_cloning

        def mel(*args, **kwargs):
            self.mel = original(*args, **kwargs)
            return self.mel

        xtts_mod.wav_to_mel_cloning = mel
        model.gpt.conditioning_encoder.register_forward_hook(lambda m, a, out: setattr(self, "encoder", out))


class RecordedUniforms:
    """`torch.multinomial` replaced by inverse-CDF sampling on seeded uniforms, recorded."""

    def __init__(self, seed):
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.draws = []
        self.original = torch.multinomial

    def __enter__(self):
        torch.multinomial = self.sample
        return self

    def __exit__(self, *exc):
        torch.multinomial = self.original

    def sample(self, probs, num_samples, replacement=False, *, generator=None, out=None):
        assert probs.dim() == 2 and probs.shape[0] == 1 and num_samples == 1
        u = float(self.rng.random())
        cdf = torch.cumsum(probs[0].double(), 0)
        target = u * float(cdf[-1])
        token = min(int(torch.searchsorted(cdf, target, right=True)), cdf.numel() - 1)
        below = float(cdf[token - 1]) if token > 0 else 0.0
        self.draws.append({"u": u, "token": token, "margin": min(float(cdf[token]) - target, target - below)})
        return torch.tensor([[token]], dtype=torch.long)


def generate(model, cond_latent, text, **settings):
    """Codes and GPT latents for `text`, as `Xtts.inference` computes them."""
    text_tokens = torch.IntTensor(text).unsqueeze(0)
    codes = model.gpt.generate(
        cond_latents=cond_latent,
        text_inputs=text_tokens,
        num_return_sequences=1,
        num_beams=1,
        length_penalty=model.config.length_penalty,
        repetition_penalty=model.config.repetition_penalty,
        output_attentions=False,
        **settings,
    )
    expected_output_len = torch.tensor([codes.shape[-1] * model.gpt.code_stride_len])
    latents = model.gpt(
        text_tokens,
        torch.tensor([text_tokens.shape[-1]]),
        codes,
        expected_output_len,
        cond_latents=cond_latent,
        return_attentions=False,
        return_latent=True,
    )
    return codes[0].tolist(), latents


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True, help="the make-test-model seed (recorded)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)

    model = load_model(args.model)
    hooks = Hooks(model)
    clip = args.out / "ref_22k.wav"
    reference_clip(clip)
    stereo = args.out / "ref_24k_stereo.wav"
    second_clip(stereo)
    xtts_mod.torchaudio.load = read_wav
    audio = xtts_mod.load_audio(str(clip), SAMPLE_RATE)
    cfg = model.config
    assert (cfg.gpt_cond_len, cfg.gpt_cond_chunk_len, cfg.max_ref_len) == (30, 4, 30)
    audio = audio[:, : SAMPLE_RATE * cfg.max_ref_len]

    tensors = {}
    with torch.inference_mode():
        latent_30_4 = model.get_gpt_cond_latents(audio, SAMPLE_RATE, length=30, chunk_length=4)
        tensors["clone_30_4.last_chunk.mel"] = hooks.mel
        tensors["clone_30_4.last_chunk.cond_encoder_out"] = hooks.encoder
        tensors["clone_30_4.gpt_cond_latent"] = latent_30_4
        tensors["clone_6_6.gpt_cond_latent"] = model.get_gpt_cond_latents(audio, SAMPLE_RATE, length=6, chunk_length=6)
        tensors["load_audio.ref_24k_stereo"] = xtts_mod.load_audio(str(stereo), SAMPLE_RATE)
        # Two files, the second loaded at 24 kHz, peak-normalised: the config's 30/4/30 cut.
        two_files, _ = model.get_conditioning_latents(
            audio_path=[str(clip), str(stereo)],
            max_ref_length=cfg.max_ref_len,
            gpt_cond_len=cfg.gpt_cond_len,
            gpt_cond_chunk_len=cfg.gpt_cond_chunk_len,
            sound_norm_refs=True,
        )
        tensors["clone_two_files_norm.gpt_cond_latent"] = two_files

        greedy = dict(do_sample=False, top_p=cfg.top_p, top_k=cfg.top_k, temperature=cfg.temperature)
        cases = {}
        codes, latents = generate(model, latent_30_4, TEXT_IDS, **greedy)
        assert codes[-1] == model.gpt.stop_audio_token and len(codes) < model.gpt.max_gen_mel_tokens, codes
        cases["greedy"] = {"codes": codes}
        tensors["greedy.gpt_latents"] = latents
        codes, latents = generate(model, latent_30_4, TEXT_IDS, max_new_tokens=MAX_NEW_TOKENS, **greedy)
        assert len(codes) == MAX_NEW_TOKENS and model.gpt.stop_audio_token not in codes, codes
        cases["max_new_tokens"] = {"codes": codes, "max_new_tokens": MAX_NEW_TOKENS}
        tensors["max_new_tokens.gpt_latents"] = latents

        sampling = dict(do_sample=True, top_p=cfg.top_p, top_k=cfg.top_k, temperature=cfg.temperature)
        with RecordedUniforms(SAMPLING_SEED) as recorder:
            codes, latents = generate(model, latent_30_4, TEXT_IDS, **sampling)
        assert len(recorder.draws) == len(codes)
        cases["sampled"] = {
            "codes": codes,
            "uniforms": [d["u"] for d in recorder.draws],
            "min_margin": min(d["margin"] for d in recorder.draws),
        }
        tensors["sampled.gpt_latents"] = latents

    record = {
        "reference": "coqui-tts 0.28.0, torch " + torch.__version__,
        "preset": "xtts-tiny",
        "seed": args.seed,
        "checkpoint_sha256": hashlib.sha256((args.model / "model.safetensors").read_bytes()).hexdigest(),
        "clip": {"file": clip.name, "sample_rate": SAMPLE_RATE, "samples": audio.shape[-1]},
        "second_clip": {"file": stereo.name, "sample_rate": 24000, "channels": 2},
        "settings": {
            "temperature": cfg.temperature,
            "top_k": cfg.top_k,
            "top_p": cfg.top_p,
            "repetition_penalty": cfg.repetition_penalty,
            "length_penalty": cfg.length_penalty,
        },
        "text_ids": TEXT_IDS,
        "cases": cases,
    }
    (args.out / "goldens.json").write_text(json.dumps(record, indent=1) + "\n")
    save_file({k: v.detach().float().contiguous() for k, v in tensors.items()}, str(args.out / "goldens.safetensors"))
    for name, value in tensors.items():
        print(f"{name}: {list(value.shape)}")
    print({name: len(case["codes"]) for name, case in cases.items()})


if __name__ == "__main__":
    main()
