#!/usr/bin/env bash
# Make the container sandbox backend runnable here, for its tests (scripts/test.sh runs this):
#   1. install docker.io, containerd, runc, iptables and debootstrap from apt if missing
#      (only as root with apt-get);
#   2. start dockerd if no engine answers (pidfile and log under $RLMD_DOCKERD_DIR,
#      default /tmp/rlmd-dockerd; waits up to ~15 s). It is left running for later runs;
#      stop it by its pid: kill "$(cat /tmp/rlmd-dockerd/dockerd.pid)";
#   3. build the base sandbox image (rlmd sandbox build base) from the debootstrap root
#      filesystem cached under ~/.cache/rlmd/rootfs/ (~2 min the first time, ~2 s after).
# Idempotent and about a second when warm. It never fails its caller: when a step cannot be
# done it says why on stderr, and the container tests then skip with that reason.
set -uo pipefail
cd "$(dirname "$0")/.."
say() { echo "docker-engine: $*" >&2; }
RUN_DIR="${RLMD_DOCKERD_DIR:-/tmp/rlmd-dockerd}"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3

engine_up() {
  "$PY" -c "import docker; docker.from_env(timeout=3).ping()" >/dev/null 2>&1
}

is_root() { [ "$(id -u)" = 0 ]; }

need=()
command -v dockerd >/dev/null || need+=(docker.io containerd runc)
command -v iptables >/dev/null || need+=(iptables)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  if is_root && command -v apt-get >/dev/null; then
    say "installing ${need[*]} (apt)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${need[@]}"; } >&2 || say "apt-get install failed"
  else
    say "missing ${need[*]} and not root with apt-get: the container tests will skip"
  fi
fi

if ! engine_up; then
  if is_root && command -v dockerd >/dev/null; then
    mkdir -p "$RUN_DIR"
    pid=""
    [ -f "$RUN_DIR/dockerd.pid" ] && pid="$(cat "$RUN_DIR/dockerd.pid" 2>/dev/null)"
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
      say "starting dockerd (log: $RUN_DIR/dockerd.log)"
      nohup dockerd --pidfile "$RUN_DIR/dockerd.pid" >"$RUN_DIR/dockerd.log" 2>&1 &
    fi
    for _ in $(seq 1 30); do
      engine_up && break
      sleep 0.5
    done
    engine_up || say "dockerd did not answer within 15 s; see $RUN_DIR/dockerd.log"
  else
    say "no docker engine answers and dockerd cannot be started here (not root or not installed)"
  fi
fi

if engine_up; then
  if [ -x .venv/bin/rlmd ]; then
    .venv/bin/rlmd sandbox build base >/dev/null || say "building the base sandbox image failed"
  else
    say "rlmd is not installed in .venv: run scripts/setup.sh first"
  fi
fi
exit 0
