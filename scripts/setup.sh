#!/usr/bin/env bash
# Idempotent set-up used by both README commands: installs what the build and tests need.
#   - libtorch 2.11.0 (the PyPI torch wheel, CPU-trimmed) + the two CUDA runtime wheels its
#     libtorch_cpu.so links against, into .deps/py (ignored by git)
#   - the reference tekken.json (tokenizer test vectors) into .deps/ref
#   - cmake (bundled opus builds with it) and ffmpeg (decode checks in tests) when missing
# Prints the environment to use: `eval "$(scripts/setup.sh --env)"`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${VOXTRAL_DEPS:-$ROOT/.deps}
PY=${PYTHON:-python3}
TORCH_VERSION=2.11.0
CUDA_RUNTIME=nvidia-cuda-runtime==13.0.96
CUDA_CUPTI=nvidia-cuda-cupti==13.0.85
MISTRAL_COMMON=1.13.1

log() { [[ ${1:-} == --env ]] || echo "[setup] $*" >&2; }

install_libtorch() {
  local lib=$DEPS/py/torch/lib/libtorch_cpu.so
  [[ -f $lib && -f $DEPS/py/.complete ]] && return
  log "installing libtorch $TORCH_VERSION from PyPI into $DEPS/py"
  rm -rf "$DEPS/py"
  mkdir -p "$DEPS"
  "$PY" -m pip install -q --no-deps --no-compile --target "$DEPS/py" \
    "torch==$TORCH_VERSION" "$CUDA_RUNTIME" "$CUDA_CUPTI" >&2
  if [[ ${VOXTRAL_KEEP_CUDA:-0} != 1 ]]; then
    # CPU install: the CUDA kernels need cuBLAS/cuDNN wheels we do not install.
    rm -f "$DEPS"/py/torch/lib/libtorch_cuda*.so "$DEPS"/py/torch/lib/libc10_cuda.so \
      "$DEPS"/py/torch/lib/libtorch_python.so
  fi
  touch "$DEPS/py/.complete"
}

# The real 131k-vocab tekken.json ships inside mistral-common's wheel: the tokenizer tests
# check the spec's test vectors against it.
install_reference_tokenizer() {
  local out=$DEPS/ref/tekken_240911.json
  [[ -f $out ]] && return
  log "fetching tekken_240911.json from the mistral-common $MISTRAL_COMMON wheel"
  local tmp; tmp=$(mktemp -d)
  "$PY" -m pip download -q --no-deps -d "$tmp" "mistral-common==$MISTRAL_COMMON" >&2
  mkdir -p "$DEPS/ref"
  "$PY" - "$tmp"/mistral_common-*.whl "$out" <<'PYEOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    data = z.read("mistral_common/data/tekken_240911.json")
with open(sys.argv[2] + ".tmp", "wb") as f:
    f.write(data)
PYEOF
  mv "$out.tmp" "$out"
  rm -rf "$tmp"
}

install_system_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ffmpeg >/dev/null || missing+=(ffmpeg)
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  local sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

install_libtorch
install_reference_tokenizer
install_system_packages
if [[ ${1:-} == --env ]]; then
  echo "export LIBTORCH='$DEPS/py/torch'"
  echo "export LIBTORCH_BYPASS_VERSION_CHECK=1"
fi
