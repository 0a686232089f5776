#!/usr/bin/env bash
# The CPU chart of README.md and docs/performance.md: `bench --json` of Voxtral-4B-TTS (a
# random checkpoint at the published size) in bf16, q8 and q4, as an AVX2 CPU on 2 threads,
# then scripts/bench-charts.py over the reports. A folder written by `voxtral-tts quantize`
# multiplies the same bytes as `--quantize` at load, and loads faster.
#
#   scripts/cpu-charts.sh VOXTRAL_DIR [OUT_DIR (docs/bench)]
#
# Make the folder once with the release build:
#   target/release/make-test-model --preset full --out VOXTRAL_DIR
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 VOXTRAL_DIR [OUT_DIR]" >&2; exit 2; }
voxtral=$1 out=${2:-docs/bench}
bench=target/release/voxtral-tts
[[ -x $bench ]] || { echo "$bench is missing: cargo build --release first" >&2; exit 1; }
mkdir -p "$out"
avx2=(env VOXTRAL_CPU_KERNEL=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
for format in none q8 q4; do
  echo "Voxtral-4B-TTS, $format" >&2
  "${avx2[@]}" "$bench" bench --model "$voxtral" --frames 8 --threads 2 --batch 1,4 \
    --quantize "$format" --json "$out/voxtral-tts-$format.json" >&2
  # The reports name the model folder, not this machine's path to it.
  sed -i "s#\"model\": \"$voxtral\"#\"model\": \"$(basename "$voxtral")\"#" "$out/voxtral-tts-$format.json"
done
scripts/bench-charts.py --title "Voxtral-4B-TTS, 2 threads as an AVX2 CPU" "$out/voxtral-tts" \
  "$out"/voxtral-tts-{none,q8,q4}.json
ls "$out"/*.svg
