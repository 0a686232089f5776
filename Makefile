# The two README commands: `make serve MODEL=DIR` and `make test`.
SHELL := /bin/bash
# A failed set-up stops here (`eval "$(...)"` alone would carry on with an empty environment).
ENV := setup_env=$$(scripts/setup.sh --env) && eval "$$setup_env" &&
# Building and serving need only libtorch and cmake, not the tests' browser and SDK.
BUILD_ENV := setup_env=$$(scripts/setup.sh --build-only --env) && eval "$$setup_env" &&

.PHONY: setup build serve test test-avx2 test-aarch64 test-cuda lint bench bench-load soak test-mlx fuzz

setup:
	@scripts/setup.sh

build:
	$(BUILD_ENV) cargo build --release

# make serve [MODEL=DIR] [ARGS="--host 0.0.0.0 --port 8000 --config FILE"]; without MODEL,
# the published model folder, fetched once into ~/.cache/voxtral-tts (scripts/serve.sh).
serve:
	@scripts/serve.sh "$(MODEL)" $(ARGS)

# Benches are compiled (not run) first, and the AVX2 run comes before the whole suite, so
# the run ends on cargo test's summary.
# The tests and benches need the random checkpoints: the feature `testkit` (off in the
# server's build), which also builds `make-test-model`.
test:
	$(ENV) scripts/lint-docker.sh && cargo test --features testkit --benches --no-run && \
	  $(AVX2_TESTS) && cargo test --features testkit --lib --bins --tests

# The tests whose results could depend on the CPU's instructions (kernel variant, libtorch's,
# oneDNN's and MKL's code paths), run as on a CPU with AVX2 and FMA but no AVX-512, whatever
# this CPU has: the tensor backends and kernels against libtorch, batched equals alone, parity
# with the reference, and the server's tests that count frames or need a long request.
# `make test` runs them too.
AS_AVX2 := VOXTRAL_CPU_KERNEL=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
AVX2_TESTS := $(AS_AVX2) cargo test --features testkit --lib tensor:: && \
  $(AS_AVX2) cargo test --features testkit --test it -- batching:: parity:: server::
test-avx2:
	$(ENV) $(AVX2_TESTS)

# The CPU kernel's tests cross-compiled for aarch64 and run under qemu (the portable variant).
test-aarch64:
	scripts/test-aarch64.sh

# The tests that need a CUDA GPU of compute capability 8.0 or more (libtorch's int4 product),
# built against the CUDA libtorch, installed in its own folders (.deps/cuda, target/cuda).
CUDA_ENV := setup_env=$$(VOXTRAL_DEPS=$(CURDIR)/.deps/cuda VOXTRAL_CUDA=1 scripts/setup.sh --build-only --env) && eval "$$setup_env" &&
test-cuda:
	$(CUDA_ENV) CARGO_TARGET_DIR=target/cuda cargo test --features testkit --lib --test it -- --ignored cuda

# Both builds: the server's, and the one with the tests' `testkit`.
lint:
	$(ENV) cargo fmt --all -- --check && cargo clippy --all-targets -- -D warnings && \
	  cargo clippy --all-targets --features testkit -- -D warnings

# `bench` on the tiny random checkpoint, made once by `make-test-model`.
TINY := target/test-models/tiny-0
bench:
	$(ENV) cargo build --release --bin voxtral-tts && \
	  cargo build --release --features testkit --bin make-test-model && \
	  { [[ -f $(TINY)/consolidated.safetensors ]] || \
	    target/release/make-test-model --preset tiny --out $(TINY); } && \
	  target/release/voxtral-tts bench --model $(TINY)

# HTTP load: 1, 4 and 8 streaming clients against the server, beside the reference.
# make bench-load [ARGS="--preset full --dtype bf16 --max-frames 16"]
bench-load:
	scripts/bench-load.sh $(ARGS)

# 20-minute soak on the tiny model: RSS must stay within +5% after warm-up (docs/reliability.md).
soak:
	scripts/soak.sh $(ARGS)

# MLX backend (feature `mlx`): lint, unit tests (both backends), the parity goldens, batched
# decoding and the server on `--device mlx`. On Linux this builds for the CPU against MLX from
# PyPI with a patched mlx-sys; scripts/setup-mlx.sh installs both (idempotent).
MLX := scripts/setup-mlx.sh cargo
test-mlx:
	$(ENV) $(MLX) clippy --features mlx,testkit --all-targets -- -D warnings && \
	  $(MLX) test --features mlx,testkit --lib --bins && \
	  $(MLX) test --features mlx,testkit --test it -- parity_mlx:: batching:: server_mlx::

# cargo-fuzz targets (fuzz/), one after another, FUZZ_SECS each (default 600): make fuzz [FUZZ_SECS=60]
# [FUZZ_TARGETS="tokenizer text"]. Results of the last long run: docs/reliability.md.
fuzz:
	FUZZ_SECS=$(or $(FUZZ_SECS),600) scripts/fuzz.sh $(FUZZ_TARGETS)
