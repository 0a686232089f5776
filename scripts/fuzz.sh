#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ one after another, FUZZ_SECS seconds each (default 600),
# then prints a summary (execs, corpus, crashes). `make fuzz` runs it.
#   scripts/fuzz.sh                     # all targets
#   scripts/fuzz.sh tokenizer text      # some of them
#   FUZZ_SECS=60 FUZZ_SANITIZER=none scripts/fuzz.sh
# Needs no nightly toolchain: RUSTC_BOOTSTRAP=1 lets stable rustc take cargo-fuzz's -Z flags.
# Seeds are read from fuzz/corpus/<target> (committed, kept small); what the fuzzer adds goes to
# fuzz/corpus-generated/<target> (ignored by git), crashes to fuzz/artifacts/<target>, each run's
# log to fuzz/logs/<target>.log.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SECS=${FUZZ_SECS:-600}
SANITIZER=${FUZZ_SANITIZER:-address}
# Inputs longer than this are not generated (seeds are at most a few KB).
MAX_LEN=${FUZZ_MAX_LEN:-8192}
TARGETS=(tokenizer text speech_request voice_pt params_json pth)
(($#)) && TARGETS=("$@")

eval "$(scripts/setup.sh --env)" || exit 1
export RUSTC_BOOTSTRAP=1
# The library links libtorch (tch): the fuzz binaries must find it at run time.
export LD_LIBRARY_PATH="$LIBTORCH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tokenizer target reads .deps/ref/tekken_240911.json (setup.sh installs it) under VOXTRAL_DEPS.
export VOXTRAL_DEPS=${VOXTRAL_DEPS:-$ROOT/.deps}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "[fuzz] installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked || exit 1
fi

echo "[fuzz] building the fuzz targets (sanitizer: $SANITIZER)" >&2
(cd fuzz && cargo fuzz build --sanitizer "$SANITIZER" --debug-assertions 2>&1) >&2 \
  || { echo "[fuzz] build failed" >&2; exit 1; }

mkdir -p fuzz/logs
declare -a SUMMARY
failed=0
for t in "${TARGETS[@]}"; do
  gen=$ROOT/fuzz/corpus-generated/$t
  mkdir -p "$gen" "$ROOT/fuzz/artifacts/$t"
  log=$ROOT/fuzz/logs/$t.log
  echo "[fuzz] $t: ${SECS}s, log $log" >&2
  start=$(date +%s)
  (cd fuzz && cargo fuzz run --sanitizer "$SANITIZER" --debug-assertions "$t" "$gen" "$ROOT/fuzz/corpus/$t" -- \
    -max_total_time="$SECS" -max_len="$MAX_LEN" -timeout=30 -print_final_stats=1) >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  corp=$(grep -Eo 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1 | cut -d' ' -f2)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  crash=$(grep -Eo 'Test unit written to [^ ]*' "$log" | tail -1 | cut -d' ' -f5)
  if ((rc == 0)); then status=ok; else status="FAILED (rc $rc${crash:+, $crash})"; failed=1; fi
  SUMMARY+=("$(printf '%-16s %-6s %5ss  execs %-10s corpus %-14s cov %-6s' \
    "$t" "$status" "$took" "${execs:-?}" "${corp:-?}" "${cov:-?}")")
done

echo
echo "Fuzzing summary (FUZZ_SECS=$SECS, sanitizer $SANITIZER):"
printf '  %s\n' "${SUMMARY[@]}"
exit $failed
