#!/usr/bin/env bash
# `make serve [MODEL=DIR] [ARGS="--port 8000 ..."]`: serves the model folder MODEL. Without
# MODEL it serves the published model folder, fetched once from the Hugging Face Hub (the
# `download` subcommand; HF_TOKEN for a gated repository) into
# ${VOXTRAL_MODEL_CACHE:-~/.cache/voxtral-tts}; when the hub cannot be reached it stops, before
# installing or building anything, with one line saying what to pass.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-}
shift || true
REPO=mistralai/Voxtral-4B-TTS-2603

if [[ -z $MODEL ]]; then
  MODEL=${VOXTRAL_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/voxtral-tts}/${REPO#*/}
  if [[ ! -f $MODEL/.complete ]]; then
    HUB=${HF_ENDPOINT:-https://huggingface.co}
    # Any HTTP answer (even 401 for a gated repository) means the hub is reachable; without
    # curl, `download` finds out itself.
    if command -v curl >/dev/null && ! curl -s -o /dev/null --max-time 15 "$HUB/api/models/$REPO"; then
      echo "make serve: no MODEL given and $HUB cannot be reached to fetch $REPO; pass a model folder: make serve MODEL=/path/to/${REPO#*/}" >&2
      exit 2
    fi
    setup_env=$(scripts/setup.sh --build-only --env)
    eval "$setup_env"
    echo "[serve] no MODEL given: fetching $REPO into $MODEL" >&2
    cargo run --release -- download --repo "$REPO" --out "$MODEL"
    touch "$MODEL/.complete"
  fi
fi
# Assigned first, so a failed set-up stops here (set -e does not see into "$(...)" in eval).
setup_env=$(scripts/setup.sh --build-only --env)
eval "$setup_env"
exec cargo run --release -- serve --model "$MODEL" "$@"
