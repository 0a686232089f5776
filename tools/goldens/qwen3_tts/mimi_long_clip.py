"""Reference codes of a clip longer than the speech-tokenizer encoder's attention window.

usage: python tools/goldens/qwen3_tts/mimi_long_clip.py --tokenizer DIR --out DIR

The official goldens' clip is 0.8 s (20 SEANet positions), so it never reaches the encoder
transformer's 250-position window. This encodes a 14 s synthetic clip (350 positions) and a
4.17 s one of odd SEANet length (right padding of the replicate-padded downsample) with
transformers' Mimi modules, the classes the official `Qwen3TTSTokenizerV2Model.encode` runs
(checked here to give the official goldens' `ref_codes` for their clip first). DIR is the
`speech_tokenizer/` folder of `make-test-model --preset qwen3-tiny-base --seed 0`.

The clip is defined by integer and float64 arithmetic that tests/parity_qwen3_codec.rs
repeats: two sines plus a 64-bit LCG's noise, rounded to int16 (floor(x · 32768 + 0.5)).
Writes OUT/goldens.json. Needs torch and transformers (made with 5.23; MimiModel's encode path
is the same as in 4.57.3, which the official package pins).
"""

import argparse
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file
from transformers import MimiConfig
from transformers.models.mimi import modeling_mimi as M

MASK = (1 << 64) - 1


def synthetic_clip(samples):
    state = 0x2545F4914F6CDD1D
    out = np.empty(samples, dtype=np.float32)
    for n in range(samples):
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK
        noise = ((state >> 40) / float(1 << 24) - 0.5) * 0.2
        t = n / 24000.0
        x = 0.3 * math.sin(2 * math.pi * 220 * t) + 0.2 * math.sin(
            2 * math.pi * 1370 * t + 0.5
        ) * math.sin(2 * math.pi * 3 * t) + noise
        q = min(max(math.floor(x * 32768 + 0.5), -32768), 32767)
        out[n] = q / 32768
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    cfg = json.loads((args.tokenizer / "config.json").read_text())
    enc = dict(cfg["encoder_config"])
    enc["frame_rate"] = enc.pop("_frame_rate")
    config = MimiConfig(**enc)
    config._attn_implementation = "eager"
    weights = load_file(args.tokenizer / "model.safetensors")

    def part(module, prefix, strict=True):
        state = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
        module.load_state_dict(state, strict=strict)
        return module.eval()

    seanet = part(M.MimiEncoder(config), "encoder.encoder.")
    transformer = part(M.MimiTransformerModel(config), "encoder.encoder_transformer.")
    stride = int(config.encodec_frame_rate / config.frame_rate)
    downsample = part(
        M.MimiConv1d(config, config.hidden_size, config.hidden_size, 2 * stride, stride,
                     bias=False, pad_mode="replicate"),
        "encoder.downsample.",
    )
    quantizer = part(M.MimiSplitResidualVectorQuantizer(config), "encoder.quantizer.")
    valid = cfg["encoder_valid_num_quantizers"]

    @torch.no_grad()
    def encode(clip):
        h = seanet(torch.from_numpy(clip)[None, None])
        h = transformer(h.transpose(1, 2)).last_hidden_state.transpose(1, 2)
        codes = quantizer.encode(downsample(h), valid)
        return codes[:, 0].T.tolist()

    goldens = Path(__file__).parents[3] / "tests/goldens/qwen3_tts/qwen3-tiny-base"
    official = json.loads((goldens / "goldens.json").read_text())
    ref = load_numpy(goldens / "tensors.safetensors")["ref_audio_pcm16"].astype(np.float32) / 32768
    want = next(c["ref_codes"] for c in official["cases"] if c.get("ref_codes"))
    want = json.loads(want) if isinstance(want, str) else want
    assert encode(ref) == want, "these modules do not give the official reference codes"

    sha = hashlib.sha256((args.tokenizer / "model.safetensors").read_bytes()).hexdigest()
    cases = [{"samples": n, "codes": encode(synthetic_clip(n))} for n in (336000, 100001)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "goldens.json").write_text(json.dumps({
        "speech_tokenizer_sha256": sha,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "clip": "tools/goldens/qwen3_tts/mimi_long_clip.py synthetic_clip",
        "cases": cases,
    }))
    for c in cases:
        print(c["samples"], "samples ->", len(c["codes"]), "frames")


if __name__ == "__main__":
    main()
