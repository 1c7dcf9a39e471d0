#!/usr/bin/env bash
# Everything the demo and the tests need, idempotently: dependencies (Node 24 comes with them as the `node`
# devDependency), a Docker engine, the compiled CLI, and the synthetic images from docker/.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x node_modules/.bin/node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "prepare: installing dependencies (npm ci)" >&2
  npm ci --no-audit --no-fund
fi
bash scripts/ensure-engine.sh
if [ "${ROBOGUIDE_SKIP_BUILD:-}" != 1 ]; then
  echo "prepare: building the CLI" >&2
  npm run --silent build
fi
echo "prepare: building synthetic images" >&2
bin/roboguide-eval images build
