#!/usr/bin/env python3
"""Speed of the reference implementation on a model folder, for `scripts/bench-load.sh`.

Runs mlx-audio 0.6.2's Voxtral TTS modules on CPU (loaded and patched to reference semantics
by tools/goldens/make_goldens.py, which imports mlx-audio and copies none of it): one request
at a time, as mlx-audio serves them, with the same text, voice and frame count as the load
benchmark. Prints one JSON object: frames/s over the timed requests, seconds per request,
and the time to the first frame (prefill + one flow-head frame; mlx-audio does not stream
audio before it decodes).

  reference_speed.py --model DIR --voice NAME --text TEXT --max-frames N [--requests K]
                     [--dtype f32]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "goldens"))
import mlx.core as mx  # noqa: E402
from make_goldens import Reference  # noqa: E402


def timed_request(ref: Reference, text: str, voice: str, max_frames: int):
    """One request: prefill, frames, decode. Returns (seconds, frames, first-frame seconds)."""
    started = time.perf_counter()
    first = []
    original = ref.flow_frame

    def flow_frame(h, x0):
        out = original(h, x0)
        if not first:
            first.append(time.perf_counter() - started)
        return out

    ref.flow_frame = flow_frame
    try:
        _, frames, _, _, _ = ref.generate(text, voice, max_frames, None)
        ref.decode(frames)
    finally:
        ref.flow_frame = original
    return time.perf_counter() - started, len(frames), first[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--voice", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--max-frames", type=int, required=True)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32"], default="f32",
                    help="the reference runs in f32 (its golden mode) only")
    a = ap.parse_args()
    mx.set_default_device(mx.cpu)
    ref = Reference(a.model)
    timed_request(ref, a.text, a.voice, a.max_frames)  # warm-up
    runs = [timed_request(ref, a.text, a.voice, a.max_frames) for _ in range(a.requests)]
    seconds = sum(r[0] for r in runs)
    frames = sum(r[1] for r in runs)
    print(json.dumps({
        "implementation": "mlx-audio 0.6.2 (CPU, reference-patched)",
        "dtype": a.dtype,
        "requests": a.requests,
        "frames": frames,
        "frames_per_s": frames / seconds,
        "seconds_per_request": seconds / a.requests,
        "first_frame_ms": float(np.median([r[2] for r in runs]) * 1e3),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
