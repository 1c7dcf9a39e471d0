#!/usr/bin/env bash
# The main job on a prepared machine: one demo pair on the synthetic driver, with its receipt printed.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD/demo-output/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$root/work"
cat > "$root/pair.json" <<JSON
{
  "job_id": "demo-pair-0001",
  "argv": ["/opt/driver/run", "numbered=5", "echo_env=DEMO_API_KEY", "session=429", "outcome=completed"],
  "cwd": "$root/work",
  "outcome_path": "$root/work/out/demo-pair-0001.json",
  "environment": { "MODEL": "demo-model", "DEMO_API_KEY": "\${DEMO_API_KEY}" },
  "ports": [],
  "timeout_seconds": 120,
  "image": "roboguide/pair-driver:1"
}
JSON
echo "demo: running one pair (spec: $root/pair.json)"
DEMO_API_KEY="sk-demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
  node_modules/.bin/node bin/run.js pair run --spec "$root/pair.json" --output "$root/evidence" --json \
  > "$root/receipt.json" || true
cat "$root/receipt.json"
echo
echo "demo: evidence in $root/evidence (receipt.json, stdout.log, stderr.log, sessions/, result.json)"
