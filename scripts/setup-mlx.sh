#!/usr/bin/env bash
# Idempotent set-up of the MLX backend (cargo feature `mlx`, crates mlx-rs 0.33 / mlx-sys 0.7).
#
# macOS (Apple Silicon, the real target): the released crates build as they are; nothing to do.
#
# Linux (CPU): the released mlx-sys only builds on macOS and fetches MLX from GitHub at build
# time. This script makes it build from the package registries alone:
#   - MLX 0.32.2 (the version mlx-c 0.7.0 pins) from PyPI: the `mlx` wheel ships the headers and
#     CMake config, the `mlx-cpu` wheel ships libmlx.so (+ its BLAS/LAPACK). Unpacked side by side
#     into .deps/mlx/wheel (libmlx.so finds its BLAS through its RPATH $ORIGIN/../../mlx_cpu.libs).
#   - mlx-sys 0.7.0 from crates.io (through `cargo fetch`, checked against Cargo.lock), unpacked to
#     .deps/mlx/mlx-sys-0.7.0 with patches/mlx-sys-0.7.0-linux.patch applied: builds mlx-c
#     against that MLX (MLX_SYS_MLX_PREFIX), links libstdc++ instead of Apple frameworks, defines
#     the half types off ARM, avoids std::format (GCC 12), and provides mach_approximate_time.
#   - libclang (bindgen) and cmake from Debian when missing.
#
# Usage:
#   scripts/setup-mlx.sh            install (idempotent)
#   scripts/setup-mlx.sh --env      install, then print the environment to eval (for a manual
#                                   `cargo build --features mlx --config \
#                                      "patch.crates-io.mlx-sys.path='$VOXTRAL_MLX_SYS'"`)
#   scripts/setup-mlx.sh cargo ...  install, then run cargo with the patched mlx-sys
#                                   (e.g. `scripts/setup-mlx.sh cargo test --features mlx`)
# The patch is passed as `--config patch.crates-io.mlx-sys.path=...` (never written to a config
# file), so builds without the feature are untouched; Cargo.lock is resolved back to the
# registry mlx-sys after the command.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS=${VOXTRAL_DEPS:-$ROOT/.deps}
PY=${PYTHON:-python3}
MLX_VERSION=0.32.2
MLX_SYS_VERSION=0.7.0
PATCH=$ROOT/patches/mlx-sys-$MLX_SYS_VERSION-linux.patch
MLX_DIR=$DEPS/mlx
PREFIX=$MLX_DIR/wheel/mlx
CRATE_DIR=$MLX_DIR/mlx-sys-$MLX_SYS_VERSION

log() { echo "[setup-mlx] $*" >&2; }

# bindgen (mlx-sys build script) loads libclang's C library at build time, through clang-sys:
# libclang.so[.N] or libclang-N.so[.M] (Debian's libclang1-N), in LIBCLANG_PATH or the system's
# library folders. libclang-cpp.so.N (the C++ library, present with other LLVM tools) is not it.
has_libclang() {
  local dir lib
  for dir in ${LIBCLANG_PATH:-} /usr/lib/llvm-*/lib /usr/lib/*-linux-gnu /usr/lib /usr/lib64 /usr/local/lib; do
    for lib in "$dir"/libclang.so* "$dir"/libclang-[0-9]*.so*; do
      [[ -e $lib ]] && return 0
    done
  done
  return 1
}

install_system_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v c++ >/dev/null || missing+=(g++)
  command -v patch >/dev/null || missing+=(patch)
  has_libclang || missing+=(libclang-dev)
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  local sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

install_mlx_wheels() {
  local marker=$MLX_DIR/wheel/.complete
  [[ -f $marker && $(cat "$marker") == "$MLX_VERSION" ]] && return
  log "installing MLX $MLX_VERSION (headers: mlx wheel, libmlx.so: mlx-cpu wheel) from PyPI"
  local tmp; tmp=$(mktemp -d)
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
    "mlx==$MLX_VERSION" "mlx-cpu==$MLX_VERSION" >&2
  rm -rf "$MLX_DIR/wheel"
  mkdir -p "$MLX_DIR/wheel"
  "$PY" - "$MLX_DIR/wheel" "$tmp"/*.whl <<'PYEOF'
import os, sys, zipfile
out = sys.argv[1]
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            # Only the C++ side: headers, CMake config, libmlx.so and the libraries it needs.
            if name.startswith(("mlx/include/", "mlx/lib/", "mlx/share/", "mlx_cpu.libs/")):
                z.extract(name, out)
for d, _, files in os.walk(out):
    for f in files:
        if ".so" in f:
            os.chmod(os.path.join(d, f), 0o755)
PYEOF
  rm -rf "$tmp"
  [[ -f $PREFIX/lib/libmlx.so && -f $PREFIX/include/mlx/mlx.h && -f $PREFIX/share/cmake/MLX/MLXConfig.cmake ]] || {
    log "the MLX wheels lack libmlx.so, headers or CMake config"
    exit 1
  }
  echo "$MLX_VERSION" >"$marker"
}

# The registry's mlx-sys, verified against Cargo.lock, plus the committed patch.
install_patched_mlx_sys() {
  local stamp; stamp="$MLX_SYS_VERSION $(sha256sum "$PATCH" | cut -d' ' -f1)"
  [[ -f $CRATE_DIR/.patched && $(cat "$CRATE_DIR/.patched") == "$stamp" ]] && return
  log "unpacking mlx-sys $MLX_SYS_VERSION from crates.io and applying $(basename "$PATCH")"
  # Also resolves Cargo.lock back to the registry mlx-sys if a patched run was interrupted.
  (cd "$ROOT" && cargo fetch -q >&2)
  local want
  want=$(awk -v v="$MLX_SYS_VERSION" '
    $0 == "name = \"mlx-sys\"" { hit = 1; next }
    hit && $1 == "version" { hit = ($3 == "\"" v "\"") ; next }
    hit && $1 == "checksum" { gsub("\"", "", $3); print $3; exit }
    /^\[\[package\]\]/ { hit = 0 }' "$ROOT/Cargo.lock")
  [[ -n $want ]] || {
    log "Cargo.lock has no registry mlx-sys $MLX_SYS_VERSION"
    exit 1
  }
  local cargo_home=${CARGO_HOME:-$HOME/.cargo} crate=
  for f in "$cargo_home"/registry/cache/*/mlx-sys-"$MLX_SYS_VERSION".crate; do
    [[ -f $f && $(sha256sum "$f" | cut -d' ' -f1) == "$want" ]] && crate=$f
  done
  [[ -n $crate ]] || {
    log "mlx-sys-$MLX_SYS_VERSION.crate with checksum $want not found in $cargo_home/registry/cache"
    exit 1
  }
  rm -rf "$CRATE_DIR"
  mkdir -p "$MLX_DIR"
  tar -xzf "$crate" -C "$MLX_DIR"
  patch -s -p1 -d "$CRATE_DIR" <"$PATCH" >&2
  echo "$stamp" >"$CRATE_DIR/.patched"
}

print_env() {
  echo "export MLX_SYS_MLX_PREFIX='$PREFIX'"
  echo "export VOXTRAL_MLX_SYS='$CRATE_DIR'"
}

if [[ $(uname -s) == Darwin ]]; then
  # The released crates build on macOS (Metal + Accelerate); nothing to install or patch.
  if [[ ${1:-} == cargo ]]; then
    shift
    exec cargo "$@"
  fi
  exit 0
fi

install_system_packages
install_mlx_wheels
install_patched_mlx_sys
case ${1:-} in
  --env) print_env ;;
  cargo)
    shift
    export MLX_SYS_MLX_PREFIX=$PREFIX
    status=0
    # After the subcommand, so external ones (clippy) pass it on to the cargo they run.
    sub=$1
    shift
    cargo "$sub" --config "patch.crates-io.mlx-sys.path='$CRATE_DIR'" "$@" || status=$?
    # Back to the registry mlx-sys in Cargo.lock (what builds without the patch expect).
    (cd "$ROOT" && cargo metadata -q --format-version 1 --offline >/dev/null 2>&1) || true
    exit $status
    ;;
  "") ;;
  *)
    log "unknown argument $1"
    exit 2
    ;;
esac
