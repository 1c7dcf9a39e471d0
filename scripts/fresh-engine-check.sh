#!/usr/bin/env bash
# The fresh-engine check (issue 40 item 9): the engine-dependent suites most sensitive to engine state, run against a
# THROWAWAY Docker engine with a fresh data root, as a machine that has never run the suite has it. A long-lived
# engine hides what a new one lacks (seen: a freshly installed engine 20.10 leaves the default bridge's
# IPAM.Config without a Gateway; a test that read it passed here for months and failed on the first new machine).
#
# As root: `dockerd` with its own --data-root, --exec-root, pidfile and socket under a temporary folder, in a network
# namespace of its own (its docker0, its firewall rules, its published ports stay there: the host's firewall, the
# shared engine and its `roboguide-pairs` network are never touched). The suites run inside that namespace with
# DOCKER_HOST on the new socket; their global set-up builds the synthetic images into the new engine from docker/
# (nothing is pulled; nothing is copied from the shared engine). Everything started is torn down on exit: the daemon
# by its pid, what is left mounted under the folder, the folder, the namespace.
# Usage: scripts/fresh-engine-check.sh [extra vitest arguments]   (npm run test:fresh-engine)
set -euo pipefail
cd "$(dirname "$0")/.."

# The suites that depend most on the engine's own state: the testing kit's containers (the default bridge, its
# gateway), a pair run, a small batch (labels, networks, the supervisor), the guarded network's set-up.
FRESH_FILES=(
  test/integration/testing-kit-containers.int.test.ts
  test/integration/pair-run.int.test.ts
  test/integration/cpu-only-batch.int.test.ts
  test/integration/pair-network.int.test.ts
)
# FRESH_ENGINE_FILES="a.int.test.ts b.int.test.ts": run only those.
if [ -n "${FRESH_ENGINE_FILES:-}" ]; then read -r -a FRESH_FILES <<<"$FRESH_ENGINE_FILES"; fi

if [ "$(id -u)" != 0 ]; then echo "fresh-engine-check: needs root (a network namespace and a dockerd of its own)" >&2; exit 2; fi
command -v dockerd >/dev/null || { echo "fresh-engine-check: dockerd is not installed" >&2; exit 2; }

tag="${FRESH_ENGINE_TAG:-$$}"
netns="rg-fresh-${tag}"
dir="$(mktemp -d /tmp/rg-fresh-XXXXXX)"
sock="${dir}/docker.sock"
pid=""

cleanup() {
  set +e
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  # Shims of containers a test left (none expected) go with their daemon; what stays mounted under the folder is
  # unmounted, deepest first, then the folder and the namespace go.
  grep -o " ${dir}[^ ]*" /proc/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  rm -rf "$dir"
  ip netns delete "$netns" 2>/dev/null
  [ ! -e "$dir" ] && ! ip netns list | grep -qw "$netns" && echo "fresh-engine-check: engine ${pid:-?}, ${dir} and ${netns} removed"
}
trap cleanup EXIT

ip netns add "$netns"
nsenter --net="/run/netns/${netns}" ip link set lo up
# `ip netns exec` fails on these machines ("Devices cgroup isn't mounted"): nsenter works. Defaults otherwise (its
# docker0 bridge and its iptables rules, both inside the namespace), as a freshly installed engine starts.
nsenter --net="/run/netns/${netns}" dockerd --data-root "${dir}/data" --exec-root "${dir}/exec" \
  --pidfile "${dir}/docker.pid" -H "unix://${sock}" >"${dir}/dockerd.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -S "$sock" ] && docker -H "unix://${sock}" info >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "fresh dockerd exited:" >&2; cat "${dir}/dockerd.log" >&2; exit 1; }
  sleep 0.1
done
docker -H "unix://${sock}" info >/dev/null 2>&1 || { echo "fresh dockerd did not answer" >&2; tail -n 40 "${dir}/dockerd.log" >&2; exit 1; }
echo "fresh engine: pid ${pid}, data root ${dir}/data, namespace ${netns}; default bridge IPAM: $(docker -H "unix://${sock}" network inspect bridge --format '{{json .IPAM.Config}}')"

start=$(date +%s)
status=0
# The suites run in the engine's namespace (the ports its pairs publish are bound there), on the build made before.
nsenter --net="/run/netns/${netns}" env DOCKER_HOST="unix://${sock}" REQUIRE_DOCKER=1 TESTCONTAINERS_RYUK_DISABLED=true \
  ROBOGUIDE_SKIP_BUILD="${ROBOGUIDE_SKIP_BUILD:-}" \
  npx vitest run --project integration --project integration-services "${FRESH_FILES[@]}" "$@" || status=$?
echo "fresh-engine check: $(( $(date +%s) - start )) s wall, ${#FRESH_FILES[@]} files, exit ${status}"
exit $status
