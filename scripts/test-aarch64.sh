#!/usr/bin/env bash
# The CPU kernel's tests on aarch64 under qemu: the kernel module (src/tensor/kernels/cpu_gemv)
# alone, in a scratch crate, cross-compiled and run with qemu-user. There the portable variant
# is the one in use and the x86 variants report themselves skipped. Installs the aarch64 Rust
# target, Debian's cross gcc and qemu-user when missing (idempotent).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=aarch64-unknown-linux-gnu
rustup target list --installed | grep -qx $TARGET || rustup target add $TARGET
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user
fi
CRATE=$ROOT/target/aarch64-kernel
mkdir -p "$CRATE/src" "$CRATE/.cargo"
cat > "$CRATE/Cargo.toml" <<TOML
[package]
name = "cpu-gemv-aarch64"
version = "0.0.0"
edition = "2021"
[dependencies]
half = "2.4"
libc = "0.2"
tracing = "0.1"
TOML
printf '#[path = "%s/src/tensor/kernels/cpu_gemv/mod.rs"]\npub mod cpu_gemv;\n' "$ROOT" > "$CRATE/src/lib.rs"
# The kernel splits work over a loaded OpenMP runtime (libtorch's in the server): link libgomp.
echo 'fn main() { println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-lgomp,--as-needed"); }' > "$CRATE/build.rs"
cat > "$CRATE/.cargo/config.toml" <<TOML
[target.$TARGET]
linker = "aarch64-linux-gnu-gcc"
runner = "qemu-aarch64 -L /usr/aarch64-linux-gnu"
TOML
cd "$CRATE" && cargo test --target $TARGET -- --nocapture
