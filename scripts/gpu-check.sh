#!/usr/bin/env bash
# The checks that need an NVIDIA GPU (the build machine and CI have none), for a person or a
# session with one. Run it on the GPU machine with a CUDA build of the binaries
# (`VOXTRAL_CUDA=1 scripts/setup.sh --build-only`, then `cargo build --release` and
# `cargo build --release --features testkit --bin make-test-model` in that environment;
# `../shared/docs/gpu.md` says how to carry them there):
#
#   scripts/gpu-check.sh [BINARY] [OUT]    (defaults: target/release/voxtral-tts, target/gpu-check)
#
# `make-test-model` is read beside BINARY.
#
#   1. correctness: CUDA f32 gives the CPU's codes on the tiny presets (noise 0, 40 frames);
#   2. batched equals alone on CUDA in f32 (`bench --dtype f32 --batch 8,32`);
#   3. the host's waits for the GPU per decode step, counted in the CUDA runtime
#      (tools/gpu/count_syncs.c): two `synth` runs of different lengths through the worker;
#   4. `bench` of the full-size random checkpoint in bf16 at 1, 8, 32 and 64 streams;
#   5. the server on that checkpoint (64 slots): one frame at each of 12 new prompt lengths,
#      then `load` from 1, 8, 32 and 64 streaming clients, with the GPU's busy time sampled
#      by nvidia-smi;
#   6. CUDA graphs (`--cuda-graphs auto`, docs/cuda-graphs.md): codes with graphs equal the
#      CPU's (tiny, f32) and the eager CUDA run's (full size, f32 and bf16, one stream);
#      batched equals alone with graphs (f32); `bench` at 1, 8, 32 and 64 streams with graphs
#      off and on; `load` from 1, 8, 32 and 64 clients with graphs on, and the capture's log
#      line (graphs, seconds, memory), in one table.
# Results go to OUT/gpu-check.txt, and the exit status is 1 when a check fails.
# CHECKS="3 4" runs only those checks; VOXTRAL_GPU_CHECK_MODELS names a folder for the
# checkpoints, kept between runs (default OUT/models).
#
# It needs nvidia-smi, python3, curl and a C compiler. Where python3 has torch, the binary
# loads that libtorch (a binary built elsewhere, as on a lent GPU machine); otherwise its own.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${1:-$ROOT/target/release/voxtral-tts}")
[[ -x $BIN ]] || { echo "gpu-check: no binary at $BIN" >&2; exit 2; }
MAKE_TEST_MODEL=$(dirname "$BIN")/make-test-model
[[ -x $MAKE_TEST_MODEL ]] || { echo "gpu-check: no make-test-model beside $BIN" >&2; exit 2; }
OUT=$(mkdir -p "${2:-$ROOT/target/gpu-check}" && realpath "${2:-$ROOT/target/gpu-check}")
MODELS=${VOXTRAL_GPU_CHECK_MODELS:-$OUT/models}
CHECKS=${CHECKS:-1 2 3 4 5 6}
REPORT=$OUT/gpu-check.txt
mkdir -p "$MODELS"
if TORCH_DIR=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null); then
  export LD_LIBRARY_PATH=$TORCH_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export RUST_LOG=${RUST_LOG:-warn}
FAILED=0

say() { echo "$*" | tee -a "$REPORT"; }
fail() { say "FAILED: $*"; FAILED=1; }
: > "$REPORT"
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
say "binary: $BIN ($("$BIN" --version))"

for preset in tiny tiny-odd full; do
  [[ -f $MODELS/$preset/params.json ]] ||
    "$MAKE_TEST_MODEL" --preset $preset --out "$MODELS/$preset" >/dev/null ||
    fail "make-test-model --preset $preset"
done

synth() { # model device dtype frames name [extra...]
  local m=$1 device=$2 dtype=$3 frames=$4 name=$5
  shift 5
  "$BIN" synth --model "$m" --voice casual_male --text "Hello there, this is a test." \
    --max-frames "$frames" --seed 1 --dtype "$dtype" --device "$device" \
    --output "$OUT/$name.wav" --dump-codes "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
}

frames_of() { python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["codes"]))' "$1"; }

checking() { [[ " $CHECKS " == *" $1 "* ]]; }

if checking 1; then
say "-- 1. CUDA f32 codes equal the CPU's (noise 0)"
for preset in tiny tiny-odd; do
  m=$MODELS/$preset
  for device in cpu cuda; do
    synth "$m" $device f32 40 "$preset-$device" --noise-scale 0 || fail "synth $preset on $device"
  done
  python3 - "$OUT/$preset-cpu" "$OUT/$preset-cuda" "$preset" <<'EOF' | tee -a "$REPORT"
import json, sys, wave, array
cpu, cuda, preset = sys.argv[1:]
a, b = (json.load(open(p + ".json")) for p in (cpu, cuda))
same = sum(x == y for x, y in zip(a["codes"], b["codes"]))
def samples(p):
    with wave.open(p + ".wav") as w:
        return array.array("h", w.readframes(w.getnframes()))
sa, sb = samples(cpu), samples(cuda)
lsb = max((abs(x - y) for x, y in zip(sa, sb)), default=0)
ok = a["prompt_ids"] == b["prompt_ids"] and a["codes"] == b["codes"] and len(sa) == len(sb)
print(f"{preset}: {'ok' if ok else 'DIFFER'}: {same} of {len(a['codes'])} frames equal "
      f"({len(b['codes'])} on cuda), wav within {lsb} LSB")
EOF
  grep -q "^$preset: ok" "$REPORT" || fail "$preset: CUDA f32 codes differ from the CPU's"
done
fi

if checking 2; then
say "-- 2. batched equals alone on CUDA, f32"
"$BIN" bench --model "$MODELS/tiny" --device cuda --dtype f32 --frames 24 --batch 8,32 2>&1 |
  grep "batched ==" | tee -a "$REPORT"
tail -2 "$REPORT" | grep -q "batched ==" || fail "bench printed no batched == alone line"
tail -2 "$REPORT" | grep -Eo "[0-9]+ of [0-9]+ frames" | awk '$1 != $3 { bad = 1 } END { exit bad }' ||
  fail "batched codes differ from alone in f32"
fi

full=$MODELS/full
if checking 3; then
say "-- 3. host waits per decode step (CUDA runtime calls, full size, bf16)"
cc -shared -fPIC -O2 -o "$OUT/count_syncs.so" "$ROOT/tools/gpu/count_syncs.c" -ldl ||
  fail "building tools/gpu/count_syncs.c"
for frames in 8 24; do
  LD_PRELOAD=$OUT/count_syncs.so synth "$full" cuda bf16 $frames "syncs-$frames" ||
    fail "synth of $frames frames"
done
python3 - "$OUT" <<'EOF' | tee -a "$REPORT"
import json, re, sys
out = sys.argv[1]
def run(n):
    frames = len(json.load(open(f"{out}/syncs-{n}.json"))["codes"])
    line = [l for l in open(f"{out}/syncs-{n}.log") if l.startswith("cuda-syncs:")][-1]
    return frames, {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
(f1, a), (f2, b) = run(8), run(24)
for name, counts, frames in (("short", a, f1), ("long", b, f2)):
    print(f"{name} run, {frames} frames: " + " ".join(f"{k} {v}" for k, v in counts.items()))
steps = f2 - f1
if steps <= 0:
    print("FAILED: the longer run made no more frames (END too early?)")
    sys.exit(1)
per = {k: (b[k] - a[k]) / steps for k in a}
print(f"per decode step ({steps} more steps): " + " ".join(f"{k} {v:.2f}" for k, v in per.items()))
waits = per["stream_syncs"] + per["device_syncs"] + per["event_syncs"] + per["blocking_copies"]
if waits > 1:
    print(f"FAILED: {waits:.2f} host waits per decode step, more than the codes' one read")
    sys.exit(1)
EOF
[[ ${PIPESTATUS[0]} == 0 ]] || FAILED=1
fi

if checking 4; then
say "-- 4. bench, full size, bf16"
timeout 300 "$BIN" bench --model "$full" --device cuda --frames 24 --batch 1,8,32,64 2>&1 |
  grep -v "^model\|codec per\|batched ==" | tee "$OUT/bench.txt" | tee -a "$REPORT"
# Each batch line is followed by its flow head's line, so look for the line, not the last one.
grep -q "^batch  64 " "$OUT/bench.txt" || fail "bench did not reach 64 streams"
fi

if checking 5; then
say "-- 5. server, full size, bf16, 64 slots: load from 1, 8, 32 and 64 streaming clients"
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 \
  >"$OUT/smi.csv" &
smi=$!
VOXTRAL_DEVICE=cuda VOXTRAL_MAX_BATCH_SIZE=64 VOXTRAL_KV_CACHE_BUDGET_MIB=16384 \
  VOXTRAL_QUEUE_CAPACITY=128 "$BIN" serve --model "$full" --port 8123 >"$OUT/serve.log" 2>&1 &
server=$!
for _ in $(seq 240); do curl -sf localhost:8123/ready >/dev/null && break; sleep 0.5; done
# One frame for each of 12 texts of new lengths, one after another, after one warm-up: on
# CUDA a prompt of a length not seen before can pay for new shapes.
speak() {
  curl -s -o /dev/null -w "%{http_code} %{time_total}\n" localhost:8123/v1/audio/speech \
    -H 'content-type: application/json' -d "{\"model\": \"tts-1\", \"voice\": \"alloy\",
      \"input\": \"$1\", \"response_format\": \"pcm\", \"max_frames\": 1}"
}
speak "Warming up." >/dev/null
for words in $(seq 4 5 59); do speak "$(yes word | head -$words | tr '\n' ' ')"; done |
  python3 -c '
import sys
rows = [line.split() for line in sys.stdin]
ok = [float(t) * 1000 for code, t in rows if code == "200"]
ok.sort()
print(f"one frame at 12 new prompt lengths: {len(ok)} ok, p50 {ok[len(ok) // 2]:.0f} ms, "
      f"max {ok[-1]:.0f} ms" if ok else "one frame at 12 new prompt lengths: none ok")' |
  tee -a "$REPORT"
timeout 240 "$BIN" load --url http://127.0.0.1:8123 --clients 1,8,32,64 --requests 2 \
  --max-frames 60 2>&1 | tail -5 | tee -a "$REPORT"
tail -1 "$REPORT" | grep -Eq "^ +64 +128 +0 " || fail "load: 64 clients did not all complete"
kill $server $smi
wait $server 2>/dev/null
python3 - "$OUT/smi.csv" <<'EOF' | tee -a "$REPORT"
import sys
rows = [l.split(",") for l in open(sys.argv[1]) if l.count(",") == 1]
busy = [float(r[0]) for r in rows]
memory = [float(r[1]) for r in rows]
print(f"GPU busy {sum(busy) / max(len(busy), 1):.0f}% of {len(busy)} samples (0.5 s apart, "
      f"from the server's start), memory in use at most {max(memory, default=0):.0f} MiB")
EOF
fi

if checking 6; then
say "-- 6. CUDA graphs"
same_codes() { # a b: the prompt ids and codes of two --dump-codes files
  python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
same = sum(x == y for x, y in zip(a["codes"], b["codes"]))
ok = a["prompt_ids"] == b["prompt_ids"] and a["codes"] == b["codes"]
print(f"{'same' if ok else 'DIFFER'} ({same} of {len(a['codes'])} frames equal)")
EOF
}
declare -A ROW
synth "$MODELS/tiny" cuda f32 40 graphs-tiny-f32 --noise-scale 0 --cuda-graphs auto ||
  fail "synth tiny with graphs"
[[ -f $OUT/tiny-cpu.json ]] || synth "$MODELS/tiny" cpu f32 40 tiny-cpu --noise-scale 0
ROW[tiny_cpu]=$(same_codes "$OUT/tiny-cpu.json" "$OUT/graphs-tiny-f32.json")
for dtype in f32 bf16; do
  for graphs in off auto; do
    synth "$full" cuda $dtype 48 "graphs-full-$dtype-$graphs" --noise-scale 0 \
      --cuda-graphs $graphs || fail "synth full $dtype graphs $graphs"
  done
  ROW[full_$dtype]=$(same_codes "$OUT/graphs-full-$dtype-off.json" "$OUT/graphs-full-$dtype-auto.json")
done
ROW[captured]=$(grep -h "captured as CUDA graphs" "$OUT/graphs-full-bf16-auto.log" | tail -1)
"$BIN" bench --model "$MODELS/tiny" --device cuda --dtype f32 --frames 24 --batch 8,32 \
  --cuda-graphs auto 2>&1 | grep "batched ==" >"$OUT/graphs-batched.txt"
ROW[batched]=$(tr '\n' ' ' <"$OUT/graphs-batched.txt")
for graphs in off auto; do
  timeout 240 "$BIN" bench --model "$full" --device cuda --frames 24 --batch 1,8,32,64 \
    --cuda-graphs $graphs >"$OUT/graphs-bench-$graphs.txt" 2>&1 || fail "bench graphs $graphs"
done
# The first figure in ms on a bench line `batch  N ...`.
step_ms() {
  awk -v b="$2" '$1 == "batch" && $2 == b {
    for (i = 3; i <= NF; i++) if ($i == "ms" || $i ~ /^ms/) { print $(i - 1); exit } }' "$1"
}
VOXTRAL_CUDA_GRAPHS=auto VOXTRAL_DEVICE=cuda VOXTRAL_MAX_BATCH_SIZE=64 \
  VOXTRAL_KV_CACHE_BUDGET_MIB=16384 VOXTRAL_QUEUE_CAPACITY=128 RUST_LOG=info \
  "$BIN" serve --model "$full" --port 8124 >"$OUT/serve-graphs.log" 2>&1 &
server=$!
for _ in $(seq 480); do curl -sf localhost:8124/ready >/dev/null && break; sleep 0.5; done
timeout 200 "$BIN" load --url http://127.0.0.1:8124 --clients 1,8,32,64 --requests 2 \
  --max-frames 60 >"$OUT/load-graphs.txt" 2>&1 || fail "load with graphs"
kill $server
wait $server 2>/dev/null
ROW[serve_captured]=$(grep -h "captured as CUDA graphs" "$OUT/serve-graphs.log" | tail -1)
{
  echo "| CUDA graphs | result |"
  echo "| --- | --- |"
  echo "| tiny f32, graphs vs CPU | ${ROW[tiny_cpu]} |"
  echo "| full f32, graphs vs eager (1 stream) | ${ROW[full_f32]} |"
  echo "| full bf16, graphs vs eager (1 stream) | ${ROW[full_bf16]} |"
  echo "| tiny f32, batched == alone with graphs | ${ROW[batched]} |"
  for b in 1 8 32 64; do
    echo "| bench full bf16, $b streams, ms per step (off / auto) |" \
      "$(step_ms "$OUT/graphs-bench-off.txt" $b) / $(step_ms "$OUT/graphs-bench-auto.txt" $b) |"
  done
  echo "| capture (synth, 8 slots) | ${ROW[captured]:-no capture logged} |"
  echo "| capture (serve, 64 slots) | ${ROW[serve_captured]:-no capture logged} |"
} | tee -a "$REPORT"
say "load with graphs (clients 1, 8, 32, 64):"
tail -5 "$OUT/load-graphs.txt" | tee -a "$REPORT"
for key in tiny_cpu full_f32 batched; do
  [[ -n ${ROW[$key]} && ${ROW[$key]} != *DIFFER* ]] || fail "graphs: $key"
done
fi

say "== $(date -u +%FT%TZ) done, $([[ $FAILED == 0 ]] && echo 'every check passed' || echo 'SOME CHECKS FAILED')"
exit $FAILED
