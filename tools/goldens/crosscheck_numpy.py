#!/usr/bin/env python3
"""Independent float64 numpy implementation of docs/voxtral-tts-spec.md sections 2-6,
written from the spec (no mlx, no mlx-audio), used to cross-check a golden case made by
make_goldens.py:  crosscheck_numpy.py MODEL_DIR CASE_DIR
It re-runs the decode loop (same prompt ids, same noise) and the codec, and prints whether
the codes are identical and the waveform's max abs / relative difference.  Slow on the
real model (plain numpy, per-head loops); meant for the tiny test checkpoints."""
import json, math, sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_goldens import read_safetensors_f32, read_voice  # file readers only

D = np.float64
model_dir = Path(sys.argv[1]); case_dir = Path(sys.argv[2])
case = json.loads((case_dir / "case.json").read_text())
P = json.loads((model_dir / "params.json").read_text())
W = {k: v.astype(D) for k, v in read_safetensors_f32(model_dir / "consolidated.safetensors").items()}
mm = P["multimodal"]; am = mm["audio_model_args"]; acu = am["acoustic_transformer_args"]; tk = mm["audio_tokenizer_args"]
S, L, NA = am["semantic_codebook_size"], am["acoustic_codebook_size"], am["n_acoustic_codebook"]

def rms(x, w, eps): return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
def silu(x): return x / (1 + np.exp(-x))
def ffn(x, p): return (silu(x @ W[p + "w1.weight"].T) * (x @ W[p + "w3.weight"].T)) @ W[p + "w2.weight"].T
def softmax(s):
    s = s - s.max(-1, keepdims=True); e = np.exp(s); return e / e.sum(-1, keepdims=True)

def attn(q, k, v, nh, nkv, hd, bias=None):
    T, Tk = q.shape[0], k.shape[0]
    q = q.reshape(T, nh, hd); k = k.reshape(Tk, nkv, hd); v = v.reshape(Tk, nkv, hd)
    out = np.zeros((T, nh, hd))
    for h in range(nh):
        kv = h // (nh // nkv)
        s = q[:, h] @ k[:, kv].T / math.sqrt(hd)
        if bias is not None: s = s + bias[h]
        out[:, h] = softmax(s) @ v[:, kv]
    return out.reshape(T, nh * hd)

# ---- backbone with explicit KV cache ----
nh, nkv, hd, eps = P["n_heads"], P["n_kv_heads"], P["head_dim"], P["norm_eps"]
theta = P["rope_theta"]
def rope(x, pos, n):  # interleaved pairs
    x = x.reshape(len(pos), n, hd).copy()
    inv = theta ** (-np.arange(0, hd, 2) / hd)
    ang = np.array(pos)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2].copy(), x[..., 1::2].copy()
    x[..., 0::2] = a * c - b * s; x[..., 1::2] = a * s + b * c
    return x.reshape(len(pos), n * hd)
K = [None] * P["n_layers"]; V = [None] * P["n_layers"]; pos0 = 0
def lm(x):
    global pos0
    T = x.shape[0]; pos = list(range(pos0, pos0 + T))
    for i in range(P["n_layers"]):
        p = f"layers.{i}."
        h = rms(x, W[p + "attention_norm.weight"], eps)
        q = rope(h @ W[p + "attention.wq.weight"].T, pos, nh)
        k = rope(h @ W[p + "attention.wk.weight"].T, pos, nkv)
        v = h @ W[p + "attention.wv.weight"].T
        K[i] = k if K[i] is None else np.concatenate([K[i], k]); V[i] = v if V[i] is None else np.concatenate([V[i], v])
        Tk = K[i].shape[0]
        mask = np.where(np.arange(Tk)[None, :] > (np.arange(T)[:, None] + pos0), -np.inf, 0.0)
        x = x + attn(q, K[i], V[i], nh, nkv, hd, np.broadcast_to(mask, (nh, T, Tk))) @ W[p + "attention.wo.weight"].T
        x = x + ffn(rms(x, W[p + "ffn_norm.weight"], eps), p + "feed_forward.")
    pos0 += T
    return rms(x, W["norm.weight"], eps)

ids = case["prompt_ids"]
emb = W["mm_audio_embeddings.tok_embeddings.weight"][ids].copy()
pos24 = [i for i, t in enumerate(ids) if t == 24]
rows, _ = read_voice(model_dir, case["voice"], len(pos24), P["dim"])
emb[pos24] = rows
A = "acoustic_transformer."
steps = int(acu.get("n_decoding_steps") or 7)
adim = acu["dim"]; anh, ankv, ahd = acu["n_heads"], acu["n_kv_heads"], acu["head_dim"]
half = adim // 2
aeps = acu.get("norm_eps", 1e-5)
inv_freq = np.exp(-math.log(10000.0) * np.arange(half) / half)
def flow(h, x0):
    logits = h @ W[A + "semantic_codebook_output.weight"].T
    logits[0] = -np.inf; logits[S + 2:] = -np.inf
    sem = int(np.argmax(logits))
    if sem == 1: return [1] + [2] * NA
    x = x0.astype(D).copy()
    for i in range(steps):
        t = i / steps
        temb = np.concatenate([np.cos(t * inv_freq), np.sin(t * inv_freq)]) @ W[A + "time_projection.weight"].T
        vs = []
        for hh in (h, np.zeros_like(h)):
            seq = np.stack([x @ W[A + "input_projection.weight"].T, temb, hh @ W[A + "llm_projection.weight"].T])
            for j in range(acu["n_layers"]):
                p = f"{A}layers.{j}."
                a_in = rms(seq, W[p + "attention_norm.weight"], aeps)
                seq = seq + attn(a_in @ W[p + "attention.wq.weight"].T, a_in @ W[p + "attention.wk.weight"].T,
                                 a_in @ W[p + "attention.wv.weight"].T, anh, ankv, ahd) @ W[p + "attention.wo.weight"].T
                seq = seq + ffn(rms(seq, W[p + "ffn_norm.weight"], aeps), p + "feed_forward.")
            seq = rms(seq, W[A + "norm.weight"], aeps)
            vs.append(seq[0] @ W[A + "acoustic_codebook_output.weight"].T)
        x = x + (1.2 * vs[0] - 0.2 * vs[1]) / steps
    x = np.clip(x, -1, 1)
    return [sem] + [int(c) + 2 for c in np.round((x + 1) / 2 * (L - 1))]

off = np.array([0] + [S + 2 + i * (L + 2) for i in range(NA)])
noise = None
if case["noise"] == "given":
    noise = np.fromfile(case_dir / "noise.f32", "<f4").reshape(case["max_frames"], NA)
h = lm(emb)[-1]
frames = []; ended = False
for i in range(case["max_frames"]):
    c = flow(h, noise[i] if noise is not None else np.zeros(NA))
    if c[0] == 1: ended = True; break
    frames.append(c)
    if i + 1 == case["max_frames"]: break
    h = lm(W["mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight"][np.array(c) + off].sum(0)[None])[-1]
ok = frames == case["codes"] and ended == case["ended"]
print("codes equal:", frames == case["codes"], "ended", ended, case["ended"], "frames", len(frames), len(case["codes"]))
for i, (a, b) in enumerate(zip(frames, case["codes"])):
    if a != b: print("first diff frame", i, a, b); break

# ---- codec on the golden's codes ----
C = "audio_tokenizer."
codes = np.array(case["codes"])
def wn(p):
    g = W[p + "original0"]; v = W[p + "original1"]
    return g * v / np.sqrt((v * v).sum(axis=(1, 2), keepdims=True))
def conv1d(x, w, stride, mode):  # x [T, Cin], w [Cout, Cin, K]
    Kk = w.shape[2]; pad = Kk - stride; T = x.shape[0]
    n = (T - Kk + pad) / stride + 1
    extra = (math.ceil(n) - 1) * stride + (Kk - pad) - T
    if mode == "replicate":
        xp = np.concatenate([np.repeat(x[:1], pad, 0), x, np.repeat(x[-1:], extra, 0)])
    else:  # reflect, with zero pre-pad on short input
        ex = 0
        if T <= max(pad, extra): ex = max(pad, extra) - T + 1; x = np.concatenate([x, np.zeros((ex, x.shape[1]))])
        xp = np.pad(x, ((pad, extra), (0, 0)), mode="reflect")
        xp = xp[: xp.shape[0] - ex]
    To = (xp.shape[0] - Kk) // stride + 1
    return np.stack([sum(xp[t * stride + k] @ w[:, :, k].T for k in range(Kk)) for t in range(To)])
def convT(x, w, stride):  # w [Cin, Cout, K]
    T = x.shape[0]; Kk = w.shape[2]
    out = np.zeros(((T - 1) * stride + Kk, w.shape[1]))
    for t in range(T):
        for k in range(Kk): out[t * stride + k] += x[t] @ w[:, :, k]
    return out[: out.shape[0] - (Kk - stride)]
cnh, cnkv, chd = tk["n_heads"], tk["n_kv_heads"], tk["head_dim"]
def pow2_slopes(n): return [(2 ** (-8 / n)) ** i for i in range(n)]
# spec 6.4 for a power of two; otherwise vllm-omni get_alibi_slopes: those of the largest power
# of two m < n, then every other slope of 2m
if math.log2(cnh).is_integer(): slopes = np.array(pow2_slopes(cnh))
else:
    m = 2 ** int(math.floor(math.log2(cnh))); slopes = np.array(pow2_slopes(m) + pow2_slopes(2 * m)[0::2][: cnh - m])
def ctrans(x, prefix, n, w):
    T = x.shape[0]; d = np.arange(T)[None, :] - np.arange(T)[:, None]
    bias = slopes[:, None, None] * d[None] + np.where((d > 0) | (d < -w), -np.inf, 0.0)[None]
    for j in range(n):
        p = f"{prefix}layers.{j}."
        a = rms(x, W[p + "attention_norm.weight"], tk["norm_eps"])
        q = rms(a @ W[p + "attention.wq.weight"].T, W[p + "attention.q_norm.weight"], 1e-6)
        k = rms(a @ W[p + "attention.wk.weight"].T, W[p + "attention.k_norm.weight"], 1e-6)
        v = a @ W[p + "attention.wv.weight"].T
        x = x + W[p + "attention_scale"] * (attn(q, k, v, cnh, cnkv, chd, bias) @ W[p + "attention.wo.weight"].T)
        x = x + W[p + "ffn_scale"] * ffn(rms(x, W[p + "ffn_norm.weight"], tk["norm_eps"]), p + "feed_forward.")
    return x
if len(codes):
    cb = W[C + "quantizer.semantic_codebook.embedding_sum"] / np.maximum(W[C + "quantizer.semantic_codebook.cluster_usage"], 1e-5)[:, None]
    x = np.concatenate([cb[codes[:, 0] - 2], (codes[:, 1:] - 2) * 2 / (L - 1) - 1], axis=1)
    strides = [int(s) for s in tk["decoder_convs_strides_str"].split(",")]
    lengths = [int(s) for s in tk["decoder_transformer_lengths_str"].split(",")]
    # window: halved per encoder downsampling (encoder strides default 2,2,2,1), doubled per decoder upsampling
    w = tk["attn_sliding_window_size"]
    for st in str(tk.get("encoder_convs_strides_str", "2,2,2,1")).split(","):
        w = w // 2 if int(st) > 1 else w
    wins = []
    for st in strides:
        w = w * 2 if st > 1 else w
        wins.append(w)
    for s in range(len(strides)):
        w = wn(f"{C}decoder_blocks.{2*s}.conv.parametrizations.weight.")
        x = conv1d(x, w, strides[s], "replicate") if s == 0 else convT(x, w, strides[s])
        x = ctrans(x, f"{C}decoder_blocks.{2*s+1}.", lengths[s], wins[s])
    x = conv1d(x, wn(f"{C}output_proj.conv.parametrizations.weight."), 1, "reflect")
    wav = x.reshape(-1)
    g = np.fromfile(case_dir / "waveform.f32", "<f4")
    print("samples", wav.size, g.size, "max|ref|", np.abs(wav).max(), "max abs diff", np.abs(wav - g).max(),
          "rel", np.abs(wav - g).max() / np.abs(wav).max())
    ok = ok and wav.size == g.size and np.abs(wav - g).max() <= 1e-4 * max(1.0, np.abs(wav).max())
print("CROSSCHECK", "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
