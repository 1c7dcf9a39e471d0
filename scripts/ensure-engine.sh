#!/usr/bin/env bash
# Make sure a Docker engine answers and a static busybox exists for the synthetic images. Idempotent:
# an engine that already answers is left alone. On a fresh Debian machine (root, no engine) this installs
# docker.io + busybox-static with apt and starts dockerd; elsewhere it says what to install.
set -euo pipefail

LOG=${ROBOGUIDE_DOCKERD_LOG:-/var/log/roboguide-dockerd.log}

engine_answers() { docker info >/dev/null 2>&1; }
static_busybox() { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; }

need_apt=()
command -v dockerd >/dev/null 2>&1 || engine_answers || need_apt+=(docker.io)
command -v docker >/dev/null 2>&1 || need_apt+=(docker.io)
static_busybox || need_apt+=(busybox-static)

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-engine: installing ${need_apt[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "ensure-engine: missing ${need_apt[*]}." >&2
    echo "  Install a Docker engine (https://docs.docker.com/engine/install/) and a static busybox" >&2
    echo "  (Debian/Ubuntu: apt-get install docker.io busybox-static), then run this again." >&2
    exit 1
  fi
fi

if engine_answers; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "ensure-engine: no Docker engine answers and this user cannot start one; start dockerd (or set DOCKER_HOST)." >&2
  exit 1
fi

start_dockerd() {
  echo "ensure-engine: starting dockerd (log: $LOG)" >&2
  setsid nohup dockerd >>"$LOG" 2>&1 < /dev/null &
  local deadline=$((SECONDS + 40))
  while [ $SECONDS -lt $deadline ]; do
    engine_answers && return 0
    # A dockerd that died (e.g. while cleaning up after a hard kill) is retried by the caller.
    pgrep -x dockerd >/dev/null 2>&1 || return 1
    sleep 0.5
  done
  return 1
}

for attempt in 1 2 3; do
  if start_dockerd; then
    echo "ensure-engine: engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null))" >&2
    exit 0
  fi
  echo "ensure-engine: dockerd did not answer (attempt $attempt); retrying" >&2
  sleep 3
done
echo "ensure-engine: giving up; last lines of $LOG:" >&2
tail -n 40 "$LOG" >&2 || true
exit 1
