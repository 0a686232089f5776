#!/usr/bin/env bash
# Load benchmark: starts `voxtral-tts serve` on a model, drives it with N concurrent streaming
# clients (`voxtral-tts load`), stops it, then times the reference implementation (mlx-audio on
# CPU, tools/bench/reference_speed.py) on the same model, text, voice and frames. Prints a
# markdown table for docs/performance.md. The reference loads the weights in f32 (its golden
# mode), so compare at --dtype f32.
#   scripts/bench-load.sh [--preset tiny|full | --model DIR] [--dtype f32|bf16]
#                         [--clients 1,4,8] [--requests 2] [--max-frames 48] [--threads N]
#                         [--no-reference]
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=tiny MODEL= DTYPE=f32 CLIENTS=1,4,8 REQUESTS=2 FRAMES=48 THREADS=0 REFERENCE=1
VOICE=neutral_female
TEXT="The quick brown fox jumps over the lazy dog."
while (($#)); do
  case $1 in
    --preset) PRESET=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --max-frames) FRAMES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --no-reference) REFERENCE=0; shift ;;
    *) echo "bench-load: unknown argument $1" >&2; exit 2 ;;
  esac
done
eval "$(scripts/setup.sh --env)"
cargo build --release -q
BIN=target/release/voxtral-tts
if [[ -z $MODEL ]]; then
  MODEL=target/test-models/$PRESET-0
  if [[ ! -f $MODEL/consolidated.safetensors ]]; then
    cargo build --release -q --features testkit --bin make-test-model
    target/release/make-test-model --out "$MODEL" --preset "$PRESET" >&2
  fi
fi
LOG=$(mktemp)
trap 'kill "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT
VOXTRAL_DTYPE=$DTYPE VOXTRAL_THREADS=$THREADS VOXTRAL_QUEUE_CAPACITY=64 \
  $BIN serve --model "$MODEL" --port 0 2>"$LOG" &
SERVER=$!
URL=
for _ in $(seq 600); do
  URL=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$LOG" | head -1)
  [[ -n $URL ]] && curl -sf "$URL/ready" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 1
done
[[ -n $URL ]] || { echo "bench-load: the server did not become ready" >&2; exit 1; }
RESULTS=$($BIN load --url "$URL" --clients "$CLIENTS" --requests "$REQUESTS" \
  --max-frames "$FRAMES" --voice "$VOICE" --input "$TEXT" --json)
kill -TERM "$SERVER"; wait "$SERVER" || true
echo "$RESULTS" >&2  # kept even if the reference run fails
REF='{}'
if ((REFERENCE)) && [[ $DTYPE != f32 ]]; then
  echo "bench-load: the reference runs in f32 only; no reference for --dtype $DTYPE" >&2
  REFERENCE=0
fi
if ((REFERENCE)); then
  PY=.deps/ref-venv/bin/python
  if [[ ! -x $PY ]]; then
    python3 -m venv .deps/ref-venv
    $PY -m pip install -q -r tools/goldens/requirements.txt
  fi
  REF=$($PY tools/bench/reference_speed.py --model "$MODEL" --voice "$VOICE" --text "$TEXT" \
    --max-frames "$FRAMES" --requests "$REQUESTS" --dtype "$DTYPE")
fi
python3 - "$RESULTS" "$REF" "$MODEL" "$DTYPE" "$FRAMES" "$THREADS" <<'PYEOF'
import json, sys
runs = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
ref = json.loads(sys.argv[2])
model, dtype, frames, threads = sys.argv[3:7]
print(f"model `{model}`, {dtype}, {frames} frames per request, server threads {threads or 0} (0 = libtorch default)\n")
one = next((r["frames_per_s"] for r in runs if r["clients"] == 1), None)
print("| streams | requests | failed | frames/s | x 1 stream | x reference | RTF | TTFA p50 | TTFA p95 |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in runs:
    scale = f"{r['frames_per_s'] / one:.2f}" if one else "-"
    vs_ref = f"{r['frames_per_s'] / ref['frames_per_s']:.2f}" if ref else "-"
    print(f"| {r['clients']} | {r['requests']} | {r['failed']} | {r['frames_per_s']:.1f} | {scale} | {vs_ref} "
          f"| {r['real_time_factor']:.3f} | {r['ttfa_p50_ms']:.0f} ms | {r['ttfa_p95_ms']:.0f} ms |")
if ref:
    print(f"\nreference ({ref['implementation']}, {ref['dtype']}, one request at a time): "
          f"{ref['frames_per_s']:.1f} frames/s, {ref['seconds_per_request']:.2f} s per request, "
          f"first frame after {ref['first_frame_ms']:.0f} ms (no audio before the final decode)")
PYEOF
