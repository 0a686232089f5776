#!/usr/bin/env bash
# Soak test: `voxtral-tts serve` on the tiny random model under steady streaming load (8
# concurrent clients, plus clients that hang up mid-stream) for --minutes (default 20). The
# server's RSS is sampled every 10 s; after the warm-up (the first quarter of the run) it
# must stay within --max-growth percent (default 5) of its first post-warm-up sample. Prints
# the samples and a verdict; exits non-zero on failure.
#   scripts/soak.sh [--minutes 20] [--max-growth 5] [--dtype f32|bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=20 MAX_GROWTH=5 DTYPE=f32
while (($#)); do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --max-growth) MAX_GROWTH=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    *) echo "soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
eval "$(scripts/setup.sh --env)"
cargo build --release -q
BIN=target/release/voxtral-tts
MODEL=target/test-models/tiny-0
if [[ ! -f $MODEL/consolidated.safetensors ]]; then
  cargo build --release -q --features testkit --bin make-test-model
  target/release/make-test-model --out "$MODEL" --preset tiny >&2
fi
LOG=$(mktemp)
trap 'kill "$SERVER" 2>/dev/null || true; rm -f "$LOG"' EXIT
VOXTRAL_DTYPE=$DTYPE VOXTRAL_THREADS=1 $BIN serve --model "$MODEL" --port 0 2>"$LOG" &
SERVER=$!
URL=
for _ in $(seq 120); do
  URL=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$LOG" | head -1)
  [[ -n $URL ]] && curl -sf "$URL/ready" >/dev/null && break
  sleep 1
done
[[ -n $URL ]] || { cat "$LOG" >&2; exit 1; }
calc() { awk "BEGIN { print ($*) }"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER/status"; }
END=$((SECONDS + MINUTES * 60))
WARM=$((SECONDS + MINUTES * 15))
(
  while ((SECONDS < END)); do
    $BIN load --url "$URL" --clients 8 --requests 4 --max-frames 40 --json >/dev/null || echo "load run failed" >&2
    # Clients that hang up after the first audio bytes.
    for _ in 1 2 3 4; do
      curl -s -N --max-time 0.3 "$URL/v1/audio/speech" -H 'Content-Type: application/json' \
        -d '{"model":"tts-1","input":"Hang up early.","voice":"alloy","response_format":"mp3","stream_format":"audio"}' \
        >/dev/null || true
    done
  done
) &
LOAD=$!
BASE= MAX=0
printf '%8s %10s\n' "seconds" "RSS MiB"
while ((SECONDS < END)); do
  sleep 10
  rss=$(rss_kb)
  printf '%8d %10.1f\n' "$SECONDS" "$(calc "$rss / 1024")"
  if ((SECONDS >= WARM)); then
    [[ -n $BASE ]] || BASE=$rss
    ((rss > MAX)) && MAX=$rss
  fi
done
wait "$LOAD" || true
completed=$(curl -s "$URL/metrics" | awk '/^speech_jobs_total\{.*outcome="completed"/ {s += $2} END {print s + 0}')
cancelled=$(curl -s "$URL/metrics" | awk '/^speech_jobs_total\{.*outcome="cancelled"/ {s += $2} END {print s + 0}')
failed=$(curl -s "$URL/metrics" | awk '/^speech_jobs_total\{.*outcome="(failed|panicked)"/ {s += $2} END {print s + 0}')
growth=$(calc "($MAX - $BASE) * 100 / $BASE")
printf 'jobs: %s completed, %s cancelled, %s failed\n' "${completed:-0}" "${cancelled:-0}" "$failed"
printf 'RSS after warm-up: %.1f MiB, peak %.1f MiB, growth %.2f%% (limit %s%%)\n' \
  "$(calc "$BASE / 1024")" "$(calc "$MAX / 1024")" "$growth" "$MAX_GROWTH"
if (($(calc "$growth > $MAX_GROWTH"))) || ((failed > 0)); then
  echo "soak: FAILED" >&2
  exit 1
fi
echo "soak: passed"
