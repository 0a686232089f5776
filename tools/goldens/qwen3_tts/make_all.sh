#!/usr/bin/env bash
# Regenerates tests/goldens/qwen3_tts/<preset>/: a fresh random checkpoint per preset from our own
# `make-test-model` (deterministic per seed, so the tests rebuild the same bytes and check them
# against the sha256s recorded here), then the official qwen-tts code on it (make_goldens.py).
set -euo pipefail
cd "$(dirname "$0")/../../.."
eval "$(scripts/setup.sh --build-only --env)"
PY=.deps/qwen3-ref-venv/bin/python
if [[ ! -x $PY ]]; then
  python3 -m venv .deps/qwen3-ref-venv
  $PY -m pip install -q -r tools/goldens/qwen3_tts/requirements.txt
  $PY -m pip install -q --no-deps "qwen-tts==0.1.1"
fi
cargo build -q --features testkit --bin make-test-model
MAKE_TEST_MODEL=${CARGO_TARGET_DIR:-target}/debug/make-test-model
SEED=0
OUT=tests/goldens/qwen3_tts
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for preset in qwen3-tiny-base qwen3-tiny-base-1b7 qwen3-tiny-custom-voice \
  qwen3-tiny-custom-voice-1b7 qwen3-tiny-voice-design; do
  $MAKE_TEST_MODEL --out "$tmp/$preset" --preset "$preset" --seed "$SEED"
  # The speech tokenizer is the same in every preset: its decoder-only cases are made once.
  extra=()
  [[ $preset == qwen3-tiny-base ]] && extra=(--decoder-cases)
  rm -rf "${OUT:?}/$preset"
  $PY tools/goldens/qwen3_tts/make_goldens.py --model "$tmp/$preset" --preset "$preset" \
    --seed "$SEED" --out "$OUT/$preset" "${extra[@]}"
done
# Encoder codes of clips past the attention window (transformers' Mimi modules, checked first
# against the official reference codes just written).
$PY tools/goldens/qwen3_tts/mimi_long_clip.py --tokenizer "$tmp/qwen3-tiny-base/speech_tokenizer" \
  --out "$OUT/mimi_long_clip"
du -sh "$OUT"
