#!/usr/bin/env python3
"""Golden generator for the Voxtral-4B-TTS Rust engine.

Runs the mlx-audio 0.6.2 implementation of Voxtral TTS on CPU in float32, with the
run-time fixes listed in the project spec (shared/docs/voxtral-tts-spec.md) ("Known deviations"),
so that its output follows the reference semantics (vLLM-Omni) exactly up to f32
rounding.  Nothing from mlx-audio is copied here: the package is imported from the
venv and individual functions/methods are replaced at run time (see PATCHES below
and README.md).

Two modes:
  generation:  make_goldens.py --model DIR --voice NAME --text TEXT --max-frames 40 \
                   --noise zeros|given [--noise-seed N | --noise-file F] --out DIR
  codec only:  make_goldens.py --model DIR --codec-only CODES.json --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

import mlx.core as mx
import mlx.nn as nn
from mlx_audio.lm.models.cache import KVCache
from mlx_audio.tts.models.voxtral_tts import acoustic_head as ah
from mlx_audio.tts.models.voxtral_tts import audio_tokenizer as atok
from mlx_audio.tts.models.voxtral_tts import voxtral_tts as vt

F32 = np.float32
N_SPECIAL_AUDIO = 2  # [EMPTY_AUDIO]=0, [END_AUDIO]=1
EMPTY_AUDIO = 0
END_AUDIO = 1
DEFAULT_EULER_STEPS = 7  # vllm-omni default when params.json has no n_decoding_steps
CFG_ALPHA = 1.2


def round_up_128(n: int) -> int:
    return 128 * ((n + 127) // 128)


# ---------------------------------------------------------------------------
# Reading the published layout (no torch needed)
# ---------------------------------------------------------------------------

def iter_safetensors_f32(path: Path):
    """Yield (name, float32 array) for each tensor of a .safetensors file, one at a
    time (bf16/f16 widened exactly), so the real 8 GB checkpoint is never held twice."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    base = 8 + hlen
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = mm[base + a: base + b]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "BF16":
            u = raw.view("<u2").astype(np.uint32) << 16
            arr = u.view(F32)
        elif dt == "F32":
            arr = raw.view("<f4").astype(F32)
        elif dt == "F16":
            arr = raw.view("<f2").astype(F32)
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        yield name, np.ascontiguousarray(arr.reshape(shape))


def read_safetensors_f32(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as float32."""
    return dict(iter_safetensors_f32(path))


def read_voice(model_dir: Path, voice: str, n_rows: int, dim: int) -> tuple[np.ndarray, str]:
    """Voice rows as f32 [N, dim]. `.pt` (what vllm-omni loads) wins; when both exist
    they must agree bit for bit."""
    vdir = model_dir / "voice_embedding"
    pt, st = vdir / f"{voice}.pt", vdir / f"{voice}.safetensors"
    got = {}
    if pt.exists():
        with zipfile.ZipFile(pt) as z:
            entries = [n for n in z.namelist() if n.endswith("/data/0")]
            if len(entries) != 1:
                raise ValueError(f"{pt}: expected one '*/data/0' entry, found {entries}")
            raw = z.read(entries[0])
        if len(raw) == n_rows * dim * 2:
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(F32)
        elif len(raw) == n_rows * dim * 4:
            arr = np.frombuffer(raw, "<f4").astype(F32)
        else:
            raise ValueError(f"{pt}: {len(raw)} bytes, expected {n_rows}*{dim}*2 (bf16)")
        got["pt"] = arr.reshape(n_rows, dim)
    if st.exists():
        t = read_safetensors_f32(st)
        arr = t["embedding"] if "embedding" in t else next(iter(t.values()))
        if arr.shape != (n_rows, dim):
            raise ValueError(f"{st}: shape {arr.shape}, expected {(n_rows, dim)}")
        got["safetensors"] = arr
    if not got:
        raise FileNotFoundError(f"no voice_embedding/{voice}.pt or .safetensors in {model_dir}")
    if len(got) == 2 and not np.array_equal(got["pt"], got["safetensors"]):
        raise ValueError(f"{voice}: .pt and .safetensors differ")
    src = "pt" if "pt" in got else "safetensors"
    return got[src], src


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def write_f32(path: Path, a) -> None:
    np.ascontiguousarray(np.asarray(a, dtype=F32)).astype("<f4").tofile(path)


# ---------------------------------------------------------------------------
# PATCHES (spec "Known deviations"); each replaces one mlx-audio function/method
# ---------------------------------------------------------------------------

def alibi_slopes_ref(n_heads: int) -> mx.array:
    """P1: slopes r^0..r^(n-1), r = 2^(-8/n) (mlx-audio uses r^1..r^n).
    Non-power-of-two head counts follow the reference's interleave rule."""
    def pow2(n):
        r = 2.0 ** (-8.0 / n)
        return [r ** i for i in range(n)]
    if math.log2(n_heads).is_integer():
        s = pow2(n_heads)
    else:
        m = 2 ** math.floor(math.log2(n_heads))
        s = pow2(m) + pow2(2 * m)[0::2][: n_heads - m]
    return mx.array(np.array(s, dtype=F32))


def _semantic_codebook_ref(self) -> mx.array:
    """P2: embedding_sum / clamp(cluster_usage, min=1e-5) in f32 (mlx-audio: 1e-8)."""
    usage = mx.maximum(self.cluster_usage.astype(mx.float32), mx.array(1e-5, dtype=mx.float32))
    return self.embedding_sum.astype(mx.float32) / usage[:, None]


def _weight_norm_ref(self) -> mx.array:
    """P3: W = v * (g / ||v||), norm over every axis but 0, no epsilon
    (torch.nn.utils.parametrizations.weight_norm, dim=0); mlx-audio adds 1e-12."""
    g = self.parametrizations["weight"]["original0"]
    v = self.parametrizations["weight"]["original1"]
    norm = mx.sqrt((v * v).sum(axis=tuple(range(1, v.ndim)), keepdims=True))
    return v * (g / norm)


def codec_window_sizes(tok_args: dict) -> list[int]:
    """P5: per-stage decoder attention windows as vllm-omni derives them: start from
    attn_sliding_window_size, halve once per encoder conv with stride > 1 (encoder
    strides default "2,2,2,1"), then double at each decoder conv with stride > 1."""
    w = int(tok_args.get("attn_sliding_window_size", 16))
    half = bool(tok_args.get("half_attn_window_upon_downsampling", True))
    enc_strides = [int(s) for s in str(tok_args.get("encoder_convs_strides_str", "2,2,2,1")).split(",")]
    for s in enc_strides:
        if half and s > 1:
            w //= 2
    dec_strides = [int(s) for s in str(tok_args["decoder_convs_strides_str"]).split(",")]
    windows = []
    for i, s in enumerate(dec_strides):
        if half and s > 1:
            w *= 2
        windows.append(w)
    return windows


def _codec_decode_ref(self, codes: mx.array) -> mx.array:
    """P5/P6: decoder pass with windows from the config and the reference block types
    (block 0 CausalConv1d with replicate pad, later blocks CausalConvTranspose1d)."""
    x = self.quantizer.decode(codes)  # (B, T, semantic_dim + acoustic_dim), f32
    for stage in range(len(self.decoder_blocks) // 2):
        conv = self.decoder_blocks[2 * stage].conv
        stride = self._strides[stage]
        x = conv(x, stride=stride, transpose=(stage > 0))
        x = self.decoder_blocks[2 * stage + 1](x, self._alibi_slopes, window_size=self._ref_windows[stage])
    x = self.output_proj.conv(x, stride=1, transpose=False)  # (B, T*up, patch)
    return x.reshape(x.shape[0], -1)  # sample = t * patch + h


def install_patches() -> None:
    atok._get_alibi_slopes = alibi_slopes_ref                      # P1 (used in __init__)
    atok.SemanticCodebook.codebook = property(_semantic_codebook_ref)  # P2
    atok.WeightNormConv._get_weight = _weight_norm_ref             # P3
    atok.VoxtralTTSAudioTokenizer.decode = _codec_decode_ref       # P5/P6
    # P4 (noise, timesteps, FSQ, CFG, END frame) is flow_frame() below, used in place of
    # FlowMatchingAudioTransformer.decode_one_frame; P7 (voice rows), P8 (raw text),
    # P9 (no extra [AUDIO] step) and P10 (cut at END) live in generate().


# ---------------------------------------------------------------------------
# Model construction from params.json (P11) and weight loading (f32)
# ---------------------------------------------------------------------------

class Reference:
    def __init__(self, model_dir: Path):
        install_patches()
        self.dir = model_dir
        self.params = json.loads((model_dir / "params.json").read_text())
        p = self.params
        mm_ = p["multimodal"]
        am = mm_["audio_model_args"]
        acu = am["acoustic_transformer_args"]
        tk = mm_["audio_tokenizer_args"]
        self.am, self.acu, self.tk = am, acu, tk
        for what, args in (("backbone", p), ("acoustic", acu), ("codec", tk)):
            if args.get("use_biases", False):
                raise NotImplementedError(f"{what}: use_biases=true is not supported")
        if not tk.get("causal", True) or not tk.get("conv_weight_norm", True):
            raise NotImplementedError("codec must be causal with weight-normed convs")

        self.sem_size = int(am["semantic_codebook_size"])
        self.levels = int(am["acoustic_codebook_size"])
        self.n_ac = int(am["n_acoustic_codebook"])
        self.audio_token_id = int(am.get("audio_token_id", 24))
        self.steps = int(acu.get("n_decoding_steps") or DEFAULT_EULER_STEPS)
        self.dim = int(p["dim"])

        cfg = vt.ModelConfig.from_dict(p)  # mlx-audio's own params.json parser
        aargs = ah.AcousticTransformerArgs(
            input_dim=int(acu.get("input_dim", p["dim"])),
            dim=int(acu["dim"]), n_layers=int(acu["n_layers"]), head_dim=int(acu["head_dim"]),
            hidden_dim=int(acu["hidden_dim"]), n_heads=int(acu["n_heads"]),
            n_kv_heads=int(acu["n_kv_heads"]), use_biases=False,
            sigma=float(acu.get("sigma", 1e-5)), sigma_max=float(acu.get("sigma_max", 1.0)),
            # reference: acoustic_transformer_args.norm_eps (default 1e-5), not the backbone's
            norm_eps=float(acu.get("norm_eps", 1e-5)),
            semantic_codebook_size=self.sem_size, acoustic_codebook_size=self.levels,
            n_acoustic_codebook=self.n_ac, n_denoising_steps=self.steps + 1, cfg_alpha=CFG_ALPHA)
        known = {f.name for f in dataclasses.fields(atok.AudioTokenizerArgs)}
        targs = atok.AudioTokenizerArgs(**{k: v for k, v in tk.items() if k in known})
        if targs.semantic_codebook_size != self.sem_size or targs.acoustic_codebook_size != self.levels \
                or targs.acoustic_dim != self.n_ac:
            raise ValueError("audio_model_args and audio_tokenizer_args disagree on codebooks")
        n_stage = len(targs.decoder_convs_strides)
        if not (len(targs.decoder_convs_kernels) == len(targs.decoder_transformer_lengths) == n_stage):
            raise ValueError("decoder_*_str lists differ in length")
        for i in range(1, n_stage):
            if targs.decoder_convs_kernels[i] == 1 and targs.decoder_convs_strides[i] == 1:
                raise NotImplementedError("decoder stage without a conv (kernel 1, stride 1)")
        cfg.get_acoustic_args = lambda: aargs
        cfg.get_tokenizer_args = lambda: targs
        model = vt.Model(cfg)

        # P12: table sizes by the reference formula 128*ceil(n/128)
        self.sem_rows = round_up_128(self.sem_size + N_SPECIAL_AUDIO)
        self.emb_rows = round_up_128(self.sem_size + N_SPECIAL_AUDIO + self.n_ac * (self.levels + N_SPECIAL_AUDIO))
        model.acoustic_transformer.semantic_codebook_output = nn.Linear(aargs.dim, self.sem_rows, bias=False)
        model.audio_codebook_embeddings = {"embeddings": nn.Embedding(self.emb_rows, cfg.dim)}
        model.audio_tokenizer._ref_windows = codec_window_sizes(tk)
        model.audio_tokenizer._alibi_slopes = alibi_slopes_ref(targs.n_heads)

        ckpt = model_dir / "consolidated.safetensors"
        weights = model.sanitize({k: mx.array(v) for k, v in iter_safetensors_f32(ckpt)})
        weights = {k: v for k, v in weights.items()
                   if not k.startswith(("audio_tokenizer.input_proj.", "audio_tokenizer.encoder_blocks."))}
        params = dict(_flatten(model.parameters()))
        for k, v in weights.items():
            if k in params and tuple(params[k].shape) != tuple(v.shape):
                raise ValueError(f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(params[k].shape)}")
        missing = set(params) - set(weights)
        extra = set(weights) - set(params)
        if missing or extra:
            raise ValueError(f"weight mismatch: missing={sorted(missing)[:10]} extra={sorted(extra)[:10]}")
        model.load_weights(list(weights.items()), strict=False)
        mx.eval(model.parameters())
        for k, v in _flatten(model.parameters()):
            if v.dtype != mx.float32:
                raise TypeError(f"{k} is {v.dtype}, expected float32")
        self.model = model
        self.ckpt = ckpt
        self.lm = model.language_model.model.model  # mlx LlamaModel (final-normed hidden)
        self.flow = model.acoustic_transformer
        self.codec = model.audio_tokenizer
        self.codec_windows = model.audio_tokenizer._ref_windows
        # offsets of each codebook in the audio embedding table (codes carry their +2)
        self.offsets = np.array([0] + [self.sem_size + N_SPECIAL_AUDIO + i * (self.levels + N_SPECIAL_AUDIO)
                                       for i in range(self.n_ac)], dtype=np.int32)

    # ----- tokenizer (P8: raw text, no sanitising) -----
    def _load_mistral_tokenizer(self):
        """mistral-common's MistralTokenizer on tekken.json. Test tekken files that
        mistral-common refuses (no audio sampling fields, no [TRANSCRIBE]-style control
        names, which its InstructTokenizerV7 looks up) are loaded from a temporary copy
        with only those fields filled in; the BPE vocab, pattern, ids and voice counts
        are untouched, so the encoded ids are the same. The edits go to meta."""
        import tempfile
        from mistral_common.tokens.tokenizers.base import SpecialTokens
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
        path = self.dir / "tekken.json"
        try:
            return MistralTokenizer.from_file(str(path)), []
        except Exception as first:  # noqa: BLE001
            tek = json.loads(path.read_text())
            fixes = [f"mistral-common refused the file as is: {type(first).__name__}: {first}"]
            audio = tek.setdefault("audio", {})
            for k, v in (("sampling_rate", 24000), ("frame_rate", 12.5),
                         ("audio_encoding_config", {"num_mel_bins": 128, "hop_length": 160, "window_size": 400})):
                if k not in audio:
                    audio[k] = v
                    fixes.append(f"audio.{k} := {v}")
            specials = tek.get("special_tokens") or []
            have = {t["token_str"] for t in specials}
            free = [t for t in specials if t["token_str"].startswith("<SPECIAL_")]
            free.sort(key=lambda t: -t["rank"])  # take the highest unused ranks
            for name in (t.value for t in SpecialTokens):
                if name not in have and free:
                    t = free.pop(0)
                    fixes.append(f"special rank {t['rank']}: {t['token_str']} := {name}")
                    t["token_str"] = name
            with tempfile.TemporaryDirectory() as td:
                tmp = Path(td) / "tekken.json"
                tmp.write_text(json.dumps(tek))
                return MistralTokenizer.from_file(str(tmp)), fixes

    def prompt_ids(self, text: str, voice: str) -> list[int]:
        from mistral_common.protocol.speech.request import SpeechRequest
        tok, self.tekken_fixes = self._load_mistral_tokenizer()
        ids = list(tok.encode_speech_request(SpeechRequest(input=text, voice=voice)).tokens)
        # sanity: the layout of spec section 2
        enc = tok.instruct_tokenizer.audio_encoder
        n = enc.audio_config.voice_num_audio_tokens[voice]
        bos = int(self.params["multimodal"].get("bos_token_id", 1))
        head = [bos, enc.begin_audio_token] + [enc.audio_token] * n + [enc.text_to_audio_token]
        tail = [enc.audio_to_text_token, enc.begin_audio_token]
        if ids[:len(head)] != head or ids[-2:] != tail or enc.audio_token != self.audio_token_id:
            raise ValueError(f"unexpected prompt layout: {ids}")
        return ids

    # ----- P4: one frame of the flow head -----
    def flow_frame(self, h: mx.array, x0: np.ndarray) -> tuple[list[int], np.ndarray]:
        f = self.flow
        logits = f.semantic_codebook_output(h).astype(mx.float32)  # (1, sem_rows), f32
        col = mx.arange(logits.shape[-1])
        banned = (col == EMPTY_AUDIO) | (col >= self.sem_size + N_SPECIAL_AUDIO)
        logits = mx.where(banned[None, :], mx.array(-np.inf, dtype=mx.float32), logits)
        semantic = int(mx.argmax(logits, axis=-1).item())
        if semantic == END_AUDIO:
            # reference: acoustic codes of an END frame are [EMPTY_AUDIO] (+2)
            return [END_AUDIO] + [EMPTY_AUDIO + N_SPECIAL_AUDIO] * self.n_ac, None

        steps = self.steps
        t = mx.array(np.array([i / steps for i in range(steps + 1)], dtype=F32))  # f32(i/steps)
        dt = mx.array(F32(1.0 / steps))
        t_proj = f.time_projection(f._time_embedding(t))  # (steps+1, dim): cat(cos, sin)
        llm = mx.concatenate([h, mx.zeros_like(h)], axis=0)  # cond row, uncond row (h = 0)
        llm_proj = f.llm_projection(llm)
        alpha = mx.array(F32(CFG_ALPHA))
        beta = mx.array(F32(1.0) - F32(CFG_ALPHA))  # (1 - alpha) in f32, as in vllm-omni
        x = mx.array(x0.reshape(1, self.n_ac).astype(F32))
        for i in range(steps):
            xb = mx.concatenate([x, x], axis=0)
            tb = mx.broadcast_to(t_proj[i][None, :], (2, t_proj.shape[-1]))
            seq = mx.stack([f.input_projection(xb), tb, llm_proj], axis=1)  # (2, 3, dim)
            out = f._run_transformer(seq)  # 3 bidirectional blocks + final norm
            v = f.acoustic_codebook_output(out[:, 0, :])
            v = alpha * v[0:1] + beta * v[1:2]
            x = x + v * dt
        x = mx.clip(x, -1.0, 1.0)
        scaled = ((x + 1.0) / 2.0) * float(self.levels - 1)
        codes = mx.round(scaled).astype(mx.int32) + N_SPECIAL_AUDIO  # round half to even
        mx.eval(codes, x)
        return [semantic] + [int(c) for c in np.array(codes)[0]], np.array(x)[0]

    def embed_codes(self, codes: list[int]) -> mx.array:
        idx = mx.array((np.array(codes, dtype=np.int32) + self.offsets)[None, :])
        e = self.model.audio_codebook_embeddings["embeddings"](idx)  # (1, 37, dim)
        return e.sum(axis=1, keepdims=True)  # (1, 1, dim)

    # ----- the decode loop -----
    def generate(self, text: str, voice: str, max_frames: int, noise: np.ndarray | None):
        ids = self.prompt_ids(text, voice)
        n_voice = sum(1 for i in ids if i == self.audio_token_id)
        rows, vsrc = read_voice(self.dir, voice, n_voice, self.dim)
        ids_mx = mx.array(np.array(ids, dtype=np.int32)[None, :])
        emb = np.array(self.lm.embed_tokens(ids_mx))  # (1, P, dim) f32
        pos = np.nonzero(np.array(ids) == self.audio_token_id)[0]
        emb[0, pos] = rows  # P7: plain copy, in order
        cache = [KVCache() for _ in self.lm.layers]
        hidden = self.lm(ids_mx, cache=cache, input_embeddings=mx.array(emb))  # prefill
        h = hidden[:, -1, :]  # P9: last prompt position ([BEGIN_AUDIO]) gives frame 0
        frames, ended, end_frame = [], False, None
        for i in range(max_frames):
            x0 = noise[i] if noise is not None else np.zeros(self.n_ac, dtype=F32)
            codes, _ = self.flow_frame(h, x0)
            if codes[0] == END_AUDIO:
                ended, end_frame = True, codes
                break  # P10: the END frame is not kept
            frames.append(codes)
            if i + 1 == max_frames:
                break
            hidden = self.lm(mx.array([[self.audio_token_id]]), cache=cache,
                             input_embeddings=self.embed_codes(codes))
            h = hidden[:, -1, :]
        return ids, frames, ended, end_frame, vsrc

    # ----- codec -----
    def decode(self, frames: list[list[int]]) -> np.ndarray:
        if not frames:
            return np.zeros(0, dtype=F32)
        c = np.array(frames, dtype=np.int32)
        if c.ndim != 2 or c.shape[1] != 1 + self.n_ac:
            raise ValueError(f"codes must be [T, {1 + self.n_ac}], got {c.shape}")
        if ((c[:, 0] < 2) | (c[:, 0] >= self.sem_size + 2)).any() or \
                ((c[:, 1:] < 2) | (c[:, 1:] >= self.levels + 2)).any():
            raise ValueError("code out of range (codes carry the +2 offset; END frames must be cut)")
        wav = self.codec.decode(mx.array(c[None]))  # subtracts 2 inside quantizer.decode
        mx.eval(wav)
        return np.array(wav[0], dtype=F32)


def dump_json(doc: dict) -> str:
    """One key per line; lists of int lists one row per line (diff-friendly)."""
    lines = []
    for k, v in doc.items():
        if isinstance(v, list) and v and isinstance(v[0], list):
            rows = ",\n  ".join(json.dumps(r, separators=(",", ":")) for r in v)
            val = "[\n  " + rows + "\n ]"
        else:
            val = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        lines.append(f" {json.dumps(k)}: {val}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flatten(v, f"{prefix}{k}.")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _flatten(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], tree


def cut_at_end(frames: list[list[int]]) -> list[list[int]]:
    for i, f in enumerate(frames):
        if f[0] == END_AUDIO:
            return frames[:i]
    return frames


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, type=Path, help="model folder in the published layout")
    ap.add_argument("--out", required=True, type=Path, help="golden case directory to write")
    ap.add_argument("--voice", help="voice preset name")
    ap.add_argument("--text", help="text to speak (passed raw to mistral-common)")
    ap.add_argument("--max-frames", type=int, default=40)
    ap.add_argument("--noise", choices=["zeros", "given"], default="zeros")
    ap.add_argument("--noise-seed", type=int, default=0,
                    help="noise=given: np.random.default_rng(seed).standard_normal((max_frames, n_acoustic), float32)")
    ap.add_argument("--noise-file", type=Path, help="noise=given: use this raw <f4 [max_frames, n_acoustic] file instead")
    ap.add_argument("--codec-only", type=Path, metavar="CODES.json",
                    help="decode these codes ([[37 ints], ...] or {\"codes\": ...}) and write codec.json + codec_waveform.f32")
    a = ap.parse_args(argv)

    mx.set_default_device(mx.cpu)
    ref = Reference(a.model)
    a.out.mkdir(parents=True, exist_ok=True)
    sha = sha256_file(ref.ckpt)
    meta = {
        "generator": "tools/goldens/make_goldens.py (mlx-audio 0.6.2 + run-time patches, float32 CPU)",
        "mlx": mx.__version__,
        "euler_steps": ref.steps,
        "cfg_alpha_f32_hex": float(F32(CFG_ALPHA)).hex(),
        "cfg_uncond_coef_f32_hex": float(F32(1.0) - F32(CFG_ALPHA)).hex(),
        "timesteps_f32_hex": [float(F32(i / ref.steps)).hex() for i in range(ref.steps + 1)],
        "dt_f32_hex": float(F32(1.0 / ref.steps)).hex(),
        "codec_windows": ref.codec_windows,
        "semantic_head_rows": ref.sem_rows,
        "audio_embedding_rows": ref.emb_rows,
    }

    if a.codec_only:
        src = json.loads(a.codec_only.read_text())
        frames = src["codes"] if isinstance(src, dict) else src
        frames = [[int(x) for x in f] for f in frames]
        kept = cut_at_end(frames)
        wav = ref.decode(kept)
        write_f32(a.out / "codec_waveform.f32", wav)
        doc = {"codes": kept, "input_frames": len(frames), "cut_at_end": len(kept) != len(frames),
               "num_samples": int(wav.shape[0]), "checkpoint_sha256": sha, "meta": meta}
        (a.out / "codec.json").write_text(dump_json(doc))
        print(f"codec-only: frames={len(kept)} samples={wav.shape[0]} "
              f"max|wav|={float(np.abs(wav).max()) if wav.size else 0.0:.6g} -> {a.out}")
        return 0

    if a.voice is None or a.text is None:
        ap.error("--voice and --text are required unless --codec-only is given")
    if a.max_frames < 1:
        ap.error("--max-frames must be >= 1")
    noise = None
    if a.noise == "given":
        if a.noise_file:
            noise = np.fromfile(a.noise_file, dtype="<f4").astype(F32)
            if noise.size != a.max_frames * ref.n_ac:
                ap.error(f"--noise-file has {noise.size} floats, expected {a.max_frames}*{ref.n_ac}")
            noise = noise.reshape(a.max_frames, ref.n_ac)
        else:
            noise = np.random.default_rng(a.noise_seed).standard_normal((a.max_frames, ref.n_ac), dtype=F32)
        write_f32(a.out / "noise.f32", noise)

    ids, frames, ended, end_frame, vsrc = ref.generate(a.text, a.voice, a.max_frames, noise)
    wav = ref.decode(frames)
    write_f32(a.out / "waveform.f32", wav)
    case = {
        "text": a.text, "voice": a.voice, "max_frames": a.max_frames, "noise": a.noise,
        "prompt_ids": ids, "codes": frames, "ended": ended, "num_samples": int(wav.shape[0]),
        "checkpoint_sha256": sha,
    }
    if a.noise == "given" and not a.noise_file:
        case["noise_seed"] = a.noise_seed
    meta["voice_file"] = vsrc
    if ref.tekken_fixes:
        meta["tekken_compat_fixes"] = ref.tekken_fixes
    meta["end_frame"] = end_frame
    case["meta"] = meta
    (a.out / "case.json").write_text(dump_json(case))
    print(f"prompt={len(ids)} ids, frames={len(frames)}, ended={ended}, samples={wav.shape[0]}, "
          f"max|wav|={float(np.abs(wav).max()) if wav.size else 0.0:.6g} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
