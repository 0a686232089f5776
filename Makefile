# The two README commands: `make serve MODEL=DIR` and `make test`.
SHELL := /bin/bash
ENV := eval "$$(scripts/setup.sh --env)" &&

.PHONY: setup build serve test lint bench fuzz

setup:
	@scripts/setup.sh

build:
	$(ENV) cargo build --release

# make serve MODEL=DIR [ARGS="--host 0.0.0.0 --port 8000 --config FILE"]
serve:
	@[[ -n "$(MODEL)" ]] || { echo "usage: make serve MODEL=/path/to/model [ARGS='--port 8000']" >&2; exit 2; }
	$(ENV) cargo run --release -- serve --model "$(MODEL)" $(ARGS)

# Benches are compiled (not run) first, so the run ends on cargo test's summary.
test:
	$(ENV) scripts/lint-docker.sh && cargo test --benches --no-run && cargo test --lib --bins --tests

lint:
	$(ENV) cargo fmt --all -- --check && cargo clippy --all-targets -- -D warnings

bench:
	$(ENV) cargo run --release -- bench --preset tiny

# cargo-fuzz targets (fuzz/), one after another, FUZZ_SECS each (default 600): make fuzz [FUZZ_SECS=60]
# [FUZZ_TARGETS="tokenizer text"]. Results of the last long run: docs/reliability.md.
fuzz:
	FUZZ_SECS=$(or $(FUZZ_SECS),600) scripts/fuzz.sh $(FUZZ_TARGETS)
