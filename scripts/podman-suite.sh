#!/usr/bin/env bash
# The Podman set (issue 28, docs/podman.md): the integration tests that need neither Swarm nor a throwaway dockerd,
# run against Podman's Docker-compatible API. As root: `podman system service` on a socket of its own, in a network
# namespace of its own (its containers' ports and its firewall rules stay there: the host's firewall and the Docker
# engine are never touched), with its own storage under a temporary folder; DOCKER_HOST points the suite at it.
# Everything it starts is torn down on exit (the service by its pid, its mounts, the folder, the namespace).
# Usage: scripts/podman-suite.sh [extra vitest arguments]   (npm run test:podman)
set -euo pipefail
cd "$(dirname "$0")/.."

# Run on Podman (the rest are skipped on Podman; why, per file, in docs/podman.md "The Podman set in CI").
PODMAN_FILES=(
  test/integration/podman.int.test.ts
  test/integration/engine-facts.int.test.ts
  test/integration/pair-run.int.test.ts
  test/integration/doctor.int.test.ts
  test/integration/serve.int.test.ts
  test/integration/sessions-skip.int.test.ts
  test/integration/hostile-archive.int.test.ts
  test/integration/secrets-e2e.int.test.ts
  test/integration/bounded-output.int.test.ts
  test/integration/diagnosis-cleanup.int.test.ts
)

# PODMAN_SUITE_FILES="a.int.test.ts b.int.test.ts": run only those (a check of one file on Podman).
if [ -n "${PODMAN_SUITE_FILES:-}" ]; then read -r -a PODMAN_FILES <<<"$PODMAN_SUITE_FILES"; fi

if [ "$(id -u)" != 0 ]; then echo "podman-suite: needs root (a network namespace of its own)" >&2; exit 2; fi
# Debian's podman + catatonit (Podman's container-init for `Init: true`), installed once, idempotently.
if ! command -v podman >/dev/null || [ ! -x /usr/libexec/podman/catatonit ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman catatonit >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman catatonit >/dev/null; }
fi

tag="${PODMAN_SUITE_TAG:-$$}"
netns="rg-podman-${tag}"
dir="$(mktemp -d /tmp/rg-podman-XXXXXX)"
sock="${dir}/podman.sock"
pid=""

cleanup() {
  set +e
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  # Containers the tests left (none expected: every test removes its own) and their conmon processes go with the storage.
  podman --root "${dir}/root" --runroot "${dir}/run" --tmpdir "${dir}/tmp" rm -af -t 0 >/dev/null 2>&1
  grep -o " ${dir}[^ ]*" /proc/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  rm -rf "$dir"
  ip netns delete "$netns" 2>/dev/null
}
trap cleanup EXIT

ip netns add "$netns"
nsenter --net="/run/netns/${netns}" ip link set lo up
# `ip netns exec` fails on these machines ("Devices cgroup isn't mounted"): nsenter works.
nsenter --net="/run/netns/${netns}" podman --root "${dir}/root" --runroot "${dir}/run" --tmpdir "${dir}/tmp" \
  system service --time=0 "unix://${sock}" >"${dir}/service.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -S "$sock" ] && curl -sf --unix-socket "$sock" http://podman/_ping >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "podman service exited:" >&2; cat "${dir}/service.log" >&2; exit 1; }
  sleep 0.1
done
curl -sf --unix-socket "$sock" http://podman/_ping >/dev/null || { echo "podman service did not answer" >&2; cat "${dir}/service.log" >&2; exit 1; }

export DOCKER_HOST="unix://${sock}" REQUIRE_DOCKER=1 ROBOGUIDE_TEST_PODMAN_NETNS="${netns}" TESTCONTAINERS_RYUK_DISABLED=true
start=$(date +%s)
status=0
npx vitest run --project integration --project integration-services "${PODMAN_FILES[@]}" "$@" || status=$?
echo "podman set: $(( $(date +%s) - start )) s wall, ${#PODMAN_FILES[@]} files, exit ${status}"
exit $status
