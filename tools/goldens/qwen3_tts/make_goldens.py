"""Goldens for the Rust Qwen3-TTS model, from the official code on a `make-test-model` folder.

usage: python tools/goldens/qwen3_tts/make_goldens.py --model DIR --preset NAME --seed N --out DIR

Loads DIR with the unmodified official `Qwen3TTSModel.from_pretrained(DIR, dtype=float32,
attn_implementation="eager")` (qwen-tts==0.1.1 on transformers==4.57.3, CPU) and runs the public
`generate_custom_voice` / `generate_voice_design` / `create_voice_clone_prompt` +
`generate_voice_clone` for the cases of the folder's model type. Nothing of the official code is
changed; observing hooks record what it computes:
  - the prefill embeddings and trailing text that `generate` hands to `talker.generate`;
  - the talker's raw logits and last hidden state per forward, the code predictor's raw logits;
  - the speaker encoder's input (log-mel) and output (x-vector), the reference codes;
  - the speech-tokenizer decoder's input codes and output waveform.
Greedy is `do_sample=False, subtalker_dosample=False` (the official API has no temperature-0
path: HF rejects temperature 0 when sampling). The fixed-noise case samples with the
generation_config.json settings and replaces `torch.multinomial` by inverse-CDF sampling on
recorded uniforms: token = first i with cumsum(p)[i] > u * sum(p), in float64 over the float32
probabilities; one uniform per talker step, then 15 per code-predictor call, in call order.

The script then checks the goldens against the spec (shared/docs/qwen3-tts-spec.md) without HF
code: the prefill equals the layout of spec section 5 rebuilt from the weights, and every
talker and code-predictor token follows from the raw logits by the rules of section 7. Any
mismatch is written to the goldens (`spec_checks`) and printed.

Writes OUT/goldens.json (cases, ids, codes, layouts, checks, the sha256 of every checkpoint
file) and OUT/tensors.safetensors (float tensors named `<case>.<what>`).
"""

import argparse
import hashlib
import importlib.machinery
import json
import re
import sys
import types
from importlib.metadata import version
from pathlib import Path

import numpy as np

# qwen_tts/core/__init__.py imports the 25 Hz tokenizer, which imports torchaudio's kaldi
# features; the 12 Hz path never calls them, and PyPI's torchaudio does not load beside this
# torch. A stub with a __spec__ (transformers probes it) lets the import through.
for name in ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
    stub = types.ModuleType(name)
    stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = stub
sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from qwen_tts import Qwen3TTSModel  # noqa: E402

# At most MAX_NEW_TOKENS - 1 frames per case (the last talker token never gets its codes).
MAX_NEW_TOKENS = 10
TEXT = "Hello world, this is a test."
TEXT_2 = "The quick brown fox jumps over the lazy dog."
REF_TEXT = "A short reference clip."
INSTRUCT = "Speak slowly, in a warm and cheerful voice."
SAMPLING_SEED = 1234
REF_SECONDS = 0.8
TOP = 5


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def reference_audio():
    """A deterministic voiced 24 kHz clip on the int16 grid (exact in any format)."""
    sr = 24000
    n = int(REF_SECONDS * sr)
    t = np.arange(n) / sr
    f0 = 140 + 20 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    noise = np.random.default_rng(7).standard_normal(n)
    x = 0.2 * voiced * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t)) + 0.02 * noise
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)
    return pcm, (pcm.astype(np.float32) / 32768.0)


class Recorder:
    """Observing hooks on the official modules: they read, never change, the computation."""

    def __init__(self, tts):
        self.tts = tts
        m = tts.model
        self.talker = m.talker
        self.reset()
        self.talker.register_forward_hook(self._talker_hook)
        self.talker.code_predictor.register_forward_hook(self._predictor_hook)
        if m.speaker_encoder is not None:
            m.speaker_encoder.register_forward_hook(self._speaker_hook)
        original_generate = self.talker.generate

        def generate(*args, **kwargs):
            self.prefill = {
                "inputs_embeds": kwargs["inputs_embeds"].detach().clone(),
                "attention_mask": kwargs["attention_mask"].detach().clone(),
                "trailing_text_hidden": kwargs["trailing_text_hidden"].detach().clone(),
                "tts_pad_embed": kwargs["tts_pad_embed"].detach().clone(),
                "kwargs": {
                    k: v for k, v in kwargs.items() if isinstance(v, (int, float, bool))
                },
                "suppress_tokens": kwargs["suppress_tokens"],
            }
            result = original_generate(*args, **kwargs)
            self.talker_tokens = result.sequences[0].tolist()
            return result

        self.talker.generate = generate
        tokenizer = m.speech_tokenizer
        original_decode = tokenizer.decode

        def decode(encoded, *args, **kwargs):
            out = original_decode(encoded, *args, **kwargs)
            self.decoded.append(
                ([e["audio_codes"].detach().clone() for e in encoded], [np.array(w) for w in out[0]])
            )
            return out

        tokenizer.decode = decode

    def reset(self):
        self.prefill = None
        self.talker_logits = []
        self.talker_hidden = []
        self.predictor_logits = []
        self.speaker = []
        self.decoded = []
        self.draws = []
        self.talker_tokens = None

    def _talker_hook(self, module, args, output):
        self.talker_logits.append(output.logits[0, -1].detach().float().clone())
        self.talker_hidden.append(output.past_hidden[0, -1].detach().float().clone())

    def _predictor_hook(self, module, args, output):
        self.predictor_logits.append(output.logits[0, -1].detach().float().clone())

    def _speaker_hook(self, module, args, output):
        self.speaker.append((args[0][0].detach().clone(), output[0].detach().clone()))


class FixedNoise:
    """`torch.multinomial` replaced by inverse-CDF sampling on recorded PCG64 uniforms."""

    def __init__(self, recorder, seed):
        self.recorder = recorder
        self.rng = np.random.Generator(np.random.PCG64(seed))
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
        self.recorder.draws.append(
            {
                "head": "talker" if probs.shape[1] != 2048 else "code_predictor",
                "u": u,
                "token": token,
                "margin": min(float(cdf[token]) - target, target - below),
            }
        )
        return torch.tensor([[token]], dtype=torch.long)


def check_checkpoint(tts, model_dir):
    """The folder holds exactly the official state_dict's keys and shapes, in the stated dtypes."""
    problems = []
    for module, path, dtype in [
        (tts.model, model_dir / "model.safetensors", "bfloat16"),
        (tts.model.speech_tokenizer.model, model_dir / "speech_tokenizer/model.safetensors", "float32"),
    ]:
        expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
        with safe_open(str(path), "pt") as f:
            stored = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            dtypes = {str(f.get_slice(k).get_dtype()) for k in f.keys()}
        missing = sorted(set(expected) - set(stored))
        extra = sorted(set(stored) - set(expected))
        wrong = sorted(k for k in set(expected) & set(stored) if expected[k] != stored[k])
        if missing or extra or wrong:
            problems.append(f"{path}: missing {missing[:5]}, extra {extra[:5]}, wrong shape {wrong[:5]}")
        wanted = {"bfloat16": "BF16", "float32": "F32"}[dtype]
        if dtypes != {wanted}:
            problems.append(f"{path}: dtypes {dtypes}, expected {wanted}")
    if problems:
        raise SystemExit("checkpoint does not match the official classes:\n" + "\n".join(problems))


class Spec:
    """The spec's rules, rebuilt from the weights with plain torch (no HF generation code)."""

    def __init__(self, tts):
        m = tts.model
        self.talker = m.talker
        self.cfg = m.config
        self.tc = m.config.talker_config

    @torch.no_grad()
    def text(self, ids):
        t = self.talker
        return t.text_projection(t.get_text_embeddings()(torch.tensor([ids])))[0]

    @torch.no_grad()
    def codec(self, entry, xvector, ref_codes):
        t = self.talker
        if entry == "x_vector":
            return xvector
        if isinstance(entry, dict):
            frame = ref_codes[entry["ref_frame"]]
            total = t.get_input_embeddings()(torch.tensor(int(frame[0])))
            for j in range(1, len(frame)):
                total = total + t.code_predictor.get_input_embeddings()[j - 1](torch.tensor(int(frame[j])))
            return total
        return t.get_input_embeddings()(torch.tensor(entry))

    def codec_prefix(self, language, speaker, speaker_is_xvector):
        tc = self.tc
        lang = None if language.lower() == "auto" else tc.codec_language_id[language.lower()]
        if (
            speaker
            and language.lower() in ("chinese", "auto")
            and tc.spk_is_dialect[speaker.lower()] is not False
        ):
            lang = tc.codec_language_id[tc.spk_is_dialect[speaker.lower()]]
        if lang is None:
            prefix = [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
        else:
            prefix = [tc.codec_think_id, tc.codec_think_bos_id, lang, tc.codec_think_eos_id]
        if speaker_is_xvector:
            prefix.append("x_vector")
        elif speaker:
            prefix.append(tc.spk_id[speaker.lower()])
        return prefix + [tc.codec_pad_id, tc.codec_bos_id]

    def layout(self, ids, instruct_ids, ref_ids, ref_len, language, speaker, xvector, streaming):
        """Spec section 5: each prefill position as (text id or None, codec entry or None)."""
        cfg, tc = self.cfg, self.tc
        pad_t, bos_t, eos_t = cfg.tts_pad_token_id, cfg.tts_bos_token_id, cfg.tts_eos_token_id
        codec = self.codec_prefix(language, speaker, xvector)
        rows = [(t, None) for t in (instruct_ids or [])]
        rows += [(t, None) for t in ids[:3]]
        rows += [(pad_t if k < len(codec) - 2 else bos_t, c) for k, c in enumerate(codec[:-1])]
        text = ids[3:-5]
        if ref_len is not None:
            t_side = ref_ids[3:-2] + text + [eos_t]
            k_side = [tc.codec_bos_id] + [{"ref_frame": k} for k in range(ref_len)]
            if not streaming:
                rows += [(t, tc.codec_pad_id) for t in t_side] + [(pad_t, k) for k in k_side]
                trailing = [pad_t]
            elif len(t_side) > len(k_side):
                rows += list(zip(t_side[: len(k_side)], k_side))
                trailing = t_side[len(k_side):]
            else:
                padded = t_side + [pad_t] * (len(k_side) - len(t_side))
                rows += list(zip(padded, k_side))
                trailing = [pad_t]
        elif streaming:
            rows.append((text[0], tc.codec_bos_id))
            trailing = text[1:] + [eos_t]
        else:
            rows += [(t, tc.codec_pad_id) for t in text + [eos_t]]
            rows.append((pad_t, tc.codec_bos_id))
            trailing = [pad_t]
        return rows, trailing

    @torch.no_grad()
    def embed_layout(self, rows, xvector, ref_codes):
        out = []
        for text_id, entry in rows:
            v = self.text([text_id])[0]
            if entry is not None:
                v = v + self.codec(entry, xvector, ref_codes)
            out.append(v)
        return torch.stack(out)

    def talker_token(self, logits, previous, greedy, draw):
        """Spec section 7: penalty 1.05 over distinct earlier tokens, EOS blocked for 2 steps,
        2048..3071 but EOS suppressed, then argmax or temperature/top-k and the recorded draw."""
        x = logits.clone()
        for t in set(previous):
            x[t] = x[t] * 1.05 if x[t] < 0 else x[t] / 1.05
        eos = self.tc.codec_eos_token_id
        if len(previous) < 2:
            x[eos] = -float("inf")
        keep = x[eos].clone()
        x[2048:] = -float("inf")
        x[eos] = keep
        return self._pick(x, greedy, draw, temperature=0.9, top_k=50)

    def predictor_token(self, logits, greedy, draw):
        return self._pick(logits.clone(), greedy, draw, temperature=0.9, top_k=50)

    @staticmethod
    def _pick(x, greedy, draw, temperature, top_k):
        if greedy:
            top2 = torch.topk(x, 2).values
            return int(torch.argmax(x)), float(top2[0] - top2[1])
        x = x / temperature
        kth = torch.topk(x, top_k).values[-1]
        x = torch.where(x < kth, torch.tensor(-float("inf")), x)
        cdf = torch.cumsum(torch.softmax(x, -1).double(), 0)
        token = min(int(torch.searchsorted(cdf, draw["u"] * float(cdf[-1]), right=True)), cdf.numel() - 1)
        return token, draw["margin"]


def spec_mel(audio):
    """Spec section 10 in float64 numpy: reflect-pad 384, periodic Hann 1024, hop 256, no
    centering, sqrt(re^2 + im^2 + 1e-9), 128 slaney mels up to 12 kHz, log(max(x, 1e-5))."""
    import librosa

    x = np.pad(audio.astype(np.float64), 384, mode="reflect")
    frames = 1 + (len(x) - 1024) // 256
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(1024) / 1024)
    stack = np.stack([x[i * 256: i * 256 + 1024] * window for i in range(frames)])
    spectrum = np.fft.rfft(stack, axis=-1)
    magnitude = np.sqrt(spectrum.real ** 2 + spectrum.imag ** 2 + 1e-9)
    basis = librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)
    return np.log(np.maximum(magnitude @ basis.T.astype(np.float64), 1e-5))


def top(logits):
    values, ids = torch.topk(logits, TOP)
    return {"ids": ids.tolist(), "values": [float(v) for v in values]}


def run_case(tts, rec, spec, case, ref):
    """Runs one case through the public API; returns its JSON record and its tensors."""
    rec.reset()
    greedy = not case.get("sampled", False)
    kwargs = dict(max_new_tokens=MAX_NEW_TOKENS)
    if greedy:
        kwargs.update(do_sample=False, subtalker_dosample=False)
    if "non_streaming_mode" in case:
        kwargs["non_streaming_mode"] = case["non_streaming_mode"]
    api = case["api"]
    prompt = None
    noise = FixedNoise(rec, SAMPLING_SEED) if not greedy else None
    if noise:
        noise.__enter__()
    try:
        if api == "generate_custom_voice":
            wavs, sr = tts.generate_custom_voice(
                text=case["text"], speaker=case["speaker"], language=case["language"],
                instruct=case.get("instruct"), **kwargs)
        elif api == "generate_voice_design":
            wavs, sr = tts.generate_voice_design(
                text=case["text"], instruct=case["instruct"], language=case["language"], **kwargs)
        else:
            prompt = tts.create_voice_clone_prompt(
                ref_audio=(ref, 24000), ref_text=case.get("ref_text"),
                x_vector_only_mode=case["x_vector_only_mode"])
            wavs, sr = tts.generate_voice_clone(
                text=case["text"], language=case["language"], voice_clone_prompt=prompt, **kwargs)
    finally:
        if noise:
            noise.__exit__()
    assert sr == 24000

    # Token ids as the wrapper builds them (the same processor calls).
    def ids_of(s):
        return tts._tokenize_texts([s])[0][0].tolist()

    ids = ids_of(tts._build_assistant_text(case["text"]))
    instruct = case.get("instruct")
    if api == "generate_custom_voice" and tts.model.tts_model_size in "0b6":
        instruct = None  # the wrapper drops it (qwen3_tts_model.py l.799)
    instruct_ids = ids_of(tts._build_instruct_text(instruct)) if instruct else None
    ref_ids = ids_of(tts._build_ref_text(case["ref_text"])) if case.get("ref_text") and not case.get("x_vector_only_mode") else None

    codes_in, wav_out = rec.decoded[-1]
    codes_in = codes_in[0]
    ref_codes = prompt[0].ref_code if prompt and prompt[0].ref_code is not None else None
    generated = codes_in[ref_codes.shape[0]:] if ref_codes is not None else codes_in
    frames = generated.shape[0]
    talker_tokens = [int(c) for c in generated[:, 0]]
    steps = len(rec.talker_logits)
    eos = tts.model.config.talker_config.codec_eos_token_id
    # One talker token per step; the last one is EOS or, at the cap, a token never decoded.
    official_tokens = rec.talker_tokens
    assert len(official_tokens) == steps and official_tokens[:-1] == talker_tokens
    stopped_by_eos = official_tokens[-1] == eos
    if "non_streaming_mode" in case:
        streaming = not case["non_streaming_mode"]
    else:
        streaming = api == "generate_voice_clone"  # the wrappers' defaults (spec 5.6)

    tensors = {}
    checks = {}
    record = {
        "name": case["name"],
        "api": api,
        "request": {k: v for k, v in case.items() if k not in ("name", "api", "wav")},
        "generate_kwargs": {k: v for k, v in kwargs.items()},
        "text_layout": "streaming" if streaming else "non_streaming",
        "greedy": greedy,
        "input_ids": ids,
        "instruct_ids": instruct_ids,
        "ref_ids": ref_ids,
        "talker_steps": steps,
        "frames": frames,
        "stopped_by": "eos" if stopped_by_eos else "max_new_tokens",
        "codes": generated.tolist(),
    }

    xvector = None
    if prompt is not None:
        xvector = prompt[0].ref_spk_embedding.float()
        mel, out = rec.speaker[-1]
        assert torch.equal(out.float(), xvector)
        if case.get("wav"):  # the same clip in every case
            tensors["x_vector"] = xvector
            tensors["speaker_mel"] = mel.float()
            checks["speaker_mel_max_abs_diff"] = float(np.abs(spec_mel(ref) - mel.numpy()).max())
        record["x_vector_only_mode"] = prompt[0].x_vector_only_mode
        if ref_codes is not None:
            record["ref_codes"] = ref_codes.tolist()
            record["decoded_codes"] = "ref_codes ++ codes"
            record["output_cut_samples"] = int(ref_codes.shape[0] / codes_in.shape[0] * wav_out[0].shape[0])
            checks["ref_frames_are_ceil_len_over_1920"] = ref_codes.shape[0] == -(-len(ref) // 1920)
            checks["cut_is_ref_frames_times_1920"] = record["output_cut_samples"] == ref_codes.shape[0] * 1920

    pre = rec.prefill
    embeds = pre["inputs_embeds"][0].float()
    trailing = pre["trailing_text_hidden"][0].float()
    tensors["prefill_embeds"] = embeds
    tensors["trailing_text"] = trailing
    tensors["tts_pad_embed"] = pre["tts_pad_embed"].reshape(-1).float()
    tensors["talker_hidden"] = torch.stack(rec.talker_hidden)
    if case.get("wav"):
        tensors["talker_logits_first"] = rec.talker_logits[0]
    record["talker_generate_kwargs"] = pre["kwargs"]
    suppressed = pre["suppress_tokens"]
    checks["suppressed_ids_are_2048_to_3071_but_eos"] = suppressed == [
        i for i in range(2048, 3072) if i != eos]

    # Spec section 5: the prefill, position by position.
    rows, trailing_ids = spec.layout(
        ids, instruct_ids, ref_ids, None if ref_codes is None else ref_codes.shape[0],
        case["language"], case.get("speaker"), xvector is not None, streaming)
    rebuilt = spec.embed_layout(rows, xvector, ref_codes)
    rebuilt_trailing = torch.stack([spec.text([t])[0] for t in trailing_ids])
    checks["prefill_length"] = [len(rows), embeds.shape[0]]
    if rebuilt.shape == embeds.shape:
        checks["prefill_max_abs_diff"] = float((rebuilt - embeds).abs().max())
    if rebuilt_trailing.shape == trailing.shape:
        checks["trailing_max_abs_diff"] = float((rebuilt_trailing - trailing).abs().max())
    checks["trailing_length"] = [len(trailing_ids), trailing.shape[0]]
    record["prefill_layout"] = [{"text": t, "codec": c} for t, c in rows]
    record["trailing_text_ids"] = trailing_ids

    # Spec section 7: every token from the raw logits.
    talker_draws = [d for d in rec.draws if d["head"] == "talker"]
    predictor_draws = [d for d in rec.draws if d["head"] == "code_predictor"]
    sampled_tokens = []
    margins = []
    for step, logits in enumerate(rec.talker_logits):
        token, margin = spec.talker_token(
            logits, sampled_tokens, greedy, None if greedy else talker_draws[step])
        sampled_tokens.append(token)
        margins.append(margin)
    checks["talker_tokens_follow_spec"] = sampled_tokens == official_tokens
    record["last_talker_token"] = official_tokens[-1]
    checks["talker_min_margin"] = min(margins)
    flat = generated[:, 1:].reshape(-1).tolist()
    predicted = []
    p_margins = []
    for k, logits in enumerate(rec.predictor_logits):
        token, margin = spec.predictor_token(logits, greedy, None if greedy else predictor_draws[k])
        predicted.append(token)
        p_margins.append(margin)
    checks["code_predictor_tokens_follow_spec"] = predicted == flat
    checks["code_predictor_min_margin"] = min(p_margins) if p_margins else None
    checks["code_predictor_calls"] = len(rec.predictor_logits)
    record["spec_checks"] = checks
    record["talker_top"] = [top(l) for l in rec.talker_logits]
    if not greedy:
        # In call order: per frame the talker's draw, then the code predictor's 15.
        record["uniforms"] = [d["u"] for d in rec.draws]
        record["uniform_heads"] = "".join("T" if d["head"] == "talker" else "C" for d in rec.draws)
    if case.get("wav"):
        tensors["wav"] = torch.from_numpy(np.asarray(wavs[0], dtype=np.float32))
        record["wav_samples"] = int(wavs[0].shape[0])
    return record, {f"{case['name']}.{k}": v.contiguous() for k, v in tensors.items()}


def cases_for(model_type):
    wav = {"wav": True}
    if model_type == "custom_voice":
        instruct = {"instruct": INSTRUCT}
        return [
            {"name": "greedy", "api": "generate_custom_voice", "text": TEXT, "speaker": "vivian",
             "language": "english", **instruct, **wav},
            {"name": "greedy_streaming_text", "api": "generate_custom_voice", "text": TEXT,
             "speaker": "vivian", "language": "english", "non_streaming_mode": False, **instruct},
            {"name": "greedy_dialect", "api": "generate_custom_voice", "text": TEXT_2,
             "speaker": "eric", "language": "auto"},
            {"name": "sampled", "api": "generate_custom_voice", "text": TEXT, "speaker": "ryan",
             "language": "english", "sampled": True, **instruct},
        ]
    if model_type == "voice_design":
        return [
            {"name": "greedy", "api": "generate_voice_design", "text": TEXT, "instruct": INSTRUCT,
             "language": "english", **wav},
            {"name": "greedy_streaming_text", "api": "generate_voice_design", "text": TEXT,
             "instruct": INSTRUCT, "language": "english", "non_streaming_mode": False},
            {"name": "greedy_auto", "api": "generate_voice_design", "text": TEXT_2,
             "instruct": INSTRUCT, "language": "auto"},
            {"name": "sampled", "api": "generate_voice_design", "text": TEXT, "instruct": INSTRUCT,
             "language": "english", "sampled": True},
        ]
    clone = {"api": "generate_voice_clone", "language": "english", "ref_text": REF_TEXT}
    return [
        {"name": "icl", **clone, "text": TEXT, "x_vector_only_mode": False, **wav},
        {"name": "icl_non_streaming", **clone, "text": TEXT, "x_vector_only_mode": False,
         "non_streaming_mode": True},
        {"name": "x_vector", **clone, "text": TEXT_2, "x_vector_only_mode": True},
        {"name": "x_vector_non_streaming", **clone, "text": TEXT_2, "x_vector_only_mode": True,
         "non_streaming_mode": True},
        {"name": "sampled_icl", **clone, "text": TEXT, "x_vector_only_mode": False, "sampled": True},
    ]


@torch.no_grad()
def decoder_cases(tts):
    """The decoder alone on random codes: past the 72-frame window, and past the 300-frame
    chunk of `chunked_decode(300, 25)` (only the samples around the chunk seam are kept)."""
    rng = np.random.default_rng(99)
    tok = tts.model.speech_tokenizer
    records, tensors = [], {}
    for name, frames, keep in [("decode_100", 100, (94, 100)), ("decode_330", 330, (296, 304))]:
        codes = torch.from_numpy(rng.integers(0, 2048, size=(frames, 16))).long()
        wavs, sr = tok.decode([{"audio_codes": codes}])
        wav = torch.from_numpy(np.asarray(wavs[0], dtype=np.float32))
        record = {"name": name, "frames": frames, "samples": wav.shape[0]}
        a, b = keep[0] * 1920, keep[1] * 1920
        record["kept_samples"] = [a, b]
        full = tok.model.decoder(codes.T.unsqueeze(0)).squeeze().float()[a:b]
        wav = wav[a:b]
        record["chunked_vs_one_pass_max_abs_diff"] = float((full - wav).abs().max())
        records.append(record)
        tensors[f"{name}.codes"] = codes.to(torch.int32).contiguous()
        tensors[f"{name}.wav"] = wav.contiguous()
    return records, tensors


def compact_json(value):
    """Indented JSON with lists of numbers on one line (codes, ids, top-k)."""
    text = json.dumps(value, indent=1)
    number_list = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]")
    return number_list.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--preset", required=True)
    ap.add_argument("--seed", required=True, type=int)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--decoder-cases", action="store_true", help="also the decoder-only cases")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    tts = Qwen3TTSModel.from_pretrained(str(args.model), dtype=torch.float32, attn_implementation="eager")
    tts.model.eval()
    check_checkpoint(tts, args.model)
    rec = Recorder(tts)
    spec = Spec(tts)
    pcm, ref = reference_audio()
    model_type = tts.model.tts_model_type

    records, tensors = [], {}
    for case in cases_for(model_type):
        record, t = run_case(tts, rec, spec, case, ref)
        records.append(record)
        tensors.update(t)
        c = record["spec_checks"]
        print(f"{args.preset} {record['name']}: {record['talker_steps']} steps -> {record['frames']} frames"
              f" ({record['stopped_by']}), prefill {c['prefill_length']}, checks {c}")
    if model_type == "base":
        tensors["ref_audio_pcm16"] = torch.from_numpy(pcm)
    extra = []
    if args.decoder_cases:
        extra, t = decoder_cases(tts)
        tensors.update(t)

    files = sorted(p for p in args.model.rglob("*") if p.is_file())
    golden = {
        "preset": args.preset,
        "seed": args.seed,
        "checkpoint_sha256": {str(p.relative_to(args.model)): sha256(p) for p in files},
        "versions": {k: version(k) for k in ("qwen-tts", "transformers", "torch")},
        "tts_model_type": model_type,
        "tts_model_size": tts.model.tts_model_size,
        "max_new_tokens": MAX_NEW_TOKENS,
        "sampling_seed": SAMPLING_SEED,
        "reference_audio": None if model_type != "base" else {
            "tensor": "ref_audio_pcm16", "sample_rate": 24000, "scale": "int16 / 32768"},
        "cases": records,
        "decoder_cases": extra,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "goldens.json").write_text(compact_json(golden) + "\n")
    save_file(tensors, str(args.out / "tensors.safetensors"), metadata={"preset": args.preset})
    failed = [r["name"] for r in records if not (
        r["spec_checks"]["talker_tokens_follow_spec"] and r["spec_checks"]["code_predictor_tokens_follow_spec"]
        and r["spec_checks"].get("prefill_max_abs_diff", 1) < 1e-5
        and r["spec_checks"].get("trailing_max_abs_diff", 1) < 1e-5)]
    if failed:
        print(f"spec checks failed for {failed}", file=sys.stderr)


if __name__ == "__main__":
    main()
