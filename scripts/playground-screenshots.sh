#!/usr/bin/env bash
# Regenerates the playground screenshots of the README (docs/playground-*.png): runs the
# playground test that goes through every tab with four tiny models served (its screenshots go
# to target/playground/), then copies them into docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
# Assigned first, so a failed set-up stops here (set -e does not see into "$(...)" in eval).
setup_env=$(scripts/setup.sh --env)
eval "$setup_env"
cargo test --features testkit --test it playground::every_tab_with_four_models -- --exact
for tab in speak clone transcribe; do
  cp "target/playground/$tab.png" "docs/playground-$tab.png"
done
echo "docs/playground-{speak,clone,transcribe}.png updated" >&2
