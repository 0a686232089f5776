# The two README commands: `make serve MODEL=DIR` and `make test`.
SHELL := /bin/bash
ENV := eval "$$(scripts/setup.sh --env)" &&

.PHONY: setup build test lint bench

setup:
	@scripts/setup.sh

build:
	$(ENV) cargo build --release

# Benches are compiled (not run) first, so the run ends on cargo test's summary.
test:
	$(ENV) scripts/lint-docker.sh && cargo test --benches --no-run && cargo test --lib --bins --tests

lint:
	$(ENV) cargo fmt --all -- --check && cargo clippy --all-targets -- -D warnings

bench:
	$(ENV) cargo run --release -- bench --preset tiny
