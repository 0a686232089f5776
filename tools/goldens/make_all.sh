#!/usr/bin/env bash
# Regenerates tests/goldens/: random checkpoints from our own `make-test-model` (deterministic
# per seed, so the tests rebuild the same bytes), then the reference run on each case.
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(scripts/setup.sh --env)"
PY=.deps/ref-venv/bin/python
if [[ ! -x $PY ]]; then
  python3 -m venv .deps/ref-venv
  $PY -m pip install -q -r tools/goldens/requirements.txt
fi
cargo build --release -q --features testkit --bin make-test-model
MAKE_TEST_MODEL=target/release/make-test-model
MODELS=target/test-models
OUT=tests/goldens

model() { # preset seed -> folder
  local dir=$MODELS/$1-$2
  [[ -f $dir/consolidated.safetensors ]] || $MAKE_TEST_MODEL --out "$dir" --preset "$1" --seed "$2" >&2
  echo "$dir"
}

golden() { # name preset seed make_goldens-args...
  local name=$1 preset=$2 seed=$3; shift 3
  local dir; dir=$(model "$preset" "$seed")
  rm -rf "${OUT:?}/$name"
  $PY tools/goldens/make_goldens.py --model "$dir" "$@" --out "$OUT/$name"
  printf '{"preset": "%s", "seed": %s}\n' "$preset" "$seed" > "$OUT/$name/model.json"
}

random_codes() { # preset seed frames out.json: uniform valid codes, for teacher-forced codec checks
  $PY - "$(model "$1" "$2")/params.json" "$3" "$4" <<'PYEOF'
import json, sys
import numpy as np
p = json.load(open(sys.argv[1]))["multimodal"]["audio_model_args"]
rng = np.random.default_rng(1234)
frames = int(sys.argv[2])
sem = rng.integers(2, 2 + p["semantic_codebook_size"], size=(frames, 1))
ac = rng.integers(2, 2 + p["acoustic_codebook_size"], size=(frames, p["n_acoustic_codebook"]))
json.dump({"codes": np.concatenate([sem, ac], axis=1).tolist()}, open(sys.argv[3], "w"))
PYEOF
}

golden tiny_zeros tiny 0 --voice casual_female --text "Hello world, this is a test." --max-frames 48 --noise zeros
golden tiny_noise tiny 0 --voice neutral_male --text "The quick brown fox jumps over the lazy dog." \
  --max-frames 40 --noise given --noise-seed 8
golden tiny_noise_end tiny 0 --voice neutral_male --text "The quick brown fox jumps over the lazy dog." \
  --max-frames 40 --noise given --noise-seed 7
golden odd_end_zeros tiny-odd 0 --voice fr_female --text "Hello world, this is a test." --max-frames 40 --noise zeros
golden odd_noise tiny-odd 0 --voice casual_female --text "Bonjour à tous, ceci est un essai." \
  --max-frames 40 --noise given --noise-seed 3
tmp=$(mktemp -d)
random_codes tiny 0 30 "$tmp/tiny.json"
golden codec_tiny tiny 0 --codec-only "$tmp/tiny.json"
random_codes tiny-odd 0 25 "$tmp/odd.json"
golden codec_odd tiny-odd 0 --codec-only "$tmp/odd.json"
rm -rf "$tmp"
du -sh "$OUT"
