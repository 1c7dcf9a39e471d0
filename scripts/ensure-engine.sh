#!/usr/bin/env bash
# Make sure a Docker engine answers and a static busybox exists for the synthetic images. Idempotent:
# an engine that already answers is left alone. On a fresh Debian machine (root, no engine) this installs
# docker.io + busybox-static (+ iproute2 for the throwaway-engine tests) with apt and starts dockerd;
# elsewhere it says what to install.
set -euo pipefail

LOG=${ROBOGUIDE_DOCKERD_LOG:-/var/log/roboguide-dockerd.log}

engine_answers() { docker info >/dev/null 2>&1; }
static_busybox() { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

need_apt=()
if ! engine_answers && ! command -v dockerd >/dev/null 2>&1; then
  if installed docker-ce-cli; then
    # docker.io conflicts with docker-ce-cli: installing it would remove the user's CLI.
    echo "ensure-engine: docker-ce-cli is installed but no engine is: install docker-ce from Docker's repository" >&2
    echo "  (https://docs.docker.com/engine/install/debian/), start it, and run this again." >&2
    exit 1
  fi
  need_apt+=(docker.io)
fi
command -v docker >/dev/null 2>&1 || [[ " ${need_apt[*]} " == *" docker.io "* ]] || need_apt+=(docker.io)
static_busybox || need_apt+=(busybox-static)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-engine: installing ${need_apt[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "ensure-engine: missing ${need_apt[*]}." >&2
    echo "  Install a Docker engine (https://docs.docker.com/engine/install/) and a static busybox" >&2
    echo "  (Debian/Ubuntu: apt-get install docker.io busybox-static iproute2), then run this again." >&2
    exit 1
  fi
fi

engine_answers && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "ensure-engine: no Docker engine answers and this user cannot start one; start dockerd (or set DOCKER_HOST)." >&2
  exit 1
fi

# Start dockerd and wait for it; a dockerd that exits (e.g. still cleaning up after a hard kill) is retried.
for attempt in 1 2 3; do
  echo "ensure-engine: starting dockerd (attempt $attempt, log: $LOG)" >&2
  setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
  pid=$!
  deadline=$((SECONDS + 40))
  while [ $SECONDS -lt $deadline ] && kill -0 "$pid" 2>/dev/null; do
    if engine_answers; then
      echo "ensure-engine: engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null))" >&2
      exit 0
    fi
    sleep 0.5
  done
  engine_answers && exit 0
  kill "$pid" 2>/dev/null || true
  echo "ensure-engine: dockerd did not answer; retrying" >&2
  sleep 3
done
echo "ensure-engine: giving up; last lines of $LOG:" >&2
tail -n 40 "$LOG" >&2 || true
exit 1
