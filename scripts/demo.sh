#!/usr/bin/env bash
# The main job on a prepared machine: a demo batch of pairs on the synthetic driver (mixed outcomes), started
# detached, followed live with `status` until it drains, then summarized (a short table and report.html).
set -euo pipefail
cd "$(dirname "$0")/.."
cli() { bin/roboguide-eval "$@"; } # the launcher: the pinned Node 24, no npx
root="$PWD/demo-output/$(date -u +%Y%m%dT%H%M%SZ)"
work="$root/work"
mkdir -p "$work/out"
printf 'print("public driver source")\n' > "$work/driver.py"
sha=$(sha256sum "$work/driver.py" | cut -d' ' -f1)
job() { # id, actions...
  local id=$1; shift
  local argv; argv=$(printf '"%s",' /opt/driver/run "$@"); argv=${argv%,}
  printf '{"job_id":"%s","argv":[%s],"cwd":"%s","outcome_path":"%s/out/%s.json","environment":{"MODEL":"demo-model","DEMO_API_KEY":"${DEMO_API_KEY}"},"timeout_seconds":120}' \
    "$id" "$argv" "$work" "$work" "$id"
}
cat > "$root/manifest.json" <<JSON
{
  "schema": "roboguide.e1.batch/v0.1",
  "image": "roboguide/pair-driver:1",
  "jobs": [
    $(job demo-0001 numbered=20 echo_env=DEMO_API_KEY session=success arm=rejected outcome=completed),
    $(job demo-0002 numbered=5 arm=hold usage=30000 outcome=completed),
    $(job demo-0003 numbered=5 stderr_bytes=2000 outcome=infra),
    $(job demo-0004 numbered=5 fake_secrets arm=guard_refused outcome=completed),
    $(job demo-0005 numbered=5 session=429 outcome=provider_stop)
  ],
  "source_sha256": { "$work/driver.py": "$sha" },
  "capacity": { "max_workers": 2, "gpu_total_mib": 81920, "gpu_baseline_mib": 1024, "gpu_fraction": 0.9 },
  "provider": { "allowed_http_statuses": [502] },
  "stop_budget_seconds": 10
}
JSON
export DEMO_API_KEY="sk-demo-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
registry="$root/registry.db"
echo "demo: manifest $root/manifest.json (5 pairs: completed, completed, infrastructure failure, completed, provider 429;"
echo "      a second worker once a completed pair measured a GPU peak that fits the budget)"
# --mount-root: the demo's work folder lies in this checkout, wherever it was cloned (host mounts are an
# allowlist: home subfolders, /tmp, /work, /data, /scratch by default).
cli e1-batch start --manifest "$root/manifest.json" --output "$root/batch" --registry "$registry" --mount-root "$work"
cli e1-batch status --output "$root/batch" --watch
echo
cli e1-batch report --output "$root/batch"
echo "demo: evidence in $root/batch (report.html, SUMMARY.json, events.jsonl, jobs/<id>/{receipt,result}.json, logs, sessions)"
# Every byte written for the demo (batch evidence, registry, driver work dir), raw and base64.
b64=$(printf '%s' "$DEMO_API_KEY" | base64 | cut -c1-24)
if grep -rqaF -e "$DEMO_API_KEY" -e "$b64" "$root"; then echo "demo: SECRET FOUND ON DISK" >&2; exit 1; fi
echo "demo: the demo secret (raw or base64) appears nowhere under $root"
