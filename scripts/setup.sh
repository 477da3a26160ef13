#!/usr/bin/env bash
# Install rlmd into ./.venv with the local-model runtime, on a fresh Debian machine.
# Usage: scripts/setup.sh [extras]   (default extras: local,dev)
# Idempotent: re-running reuses the venv and pip's wheel cache (llama-cpp-python builds
# from source once, ~5 min on 2 cores; later installs take seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-local,dev}"
PY="${PYTHON:-python3}"

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(build-essential)
"$PY" -c "import venv, ensurepip" 2>/dev/null || need_apt+=(python3-venv)
# bubblewrap gives the subprocess sandbox its namespaces (no network, hidden home, PID 1);
# without it rlmd falls back to unshare (less isolation, recorded per run).
want_apt=()
command -v bwrap >/dev/null || want_apt+=(bubblewrap)
if ((${#need_apt[@]} + ${#want_apt[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        "${need_apt[@]}" "${want_apt[@]}"; } >&2
  elif ((${#need_apt[@]})); then
    echo "setup: please install: ${need_apt[*]} (apt-get install ${need_apt[*]})" >&2; exit 2
  else
    echo "setup: optional: apt-get install ${want_apt[*]} for a fully isolated sandbox" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Install chatter goes to stderr: stdout is for the answer (scripts/demo.sh).
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | { grep -v '^WARNING: Location' || true; } >&2
# llama-cpp-python ships only an sdist. Its default build is -march=native, and on CPUs with
# AMX/AVX-512-FP16 (Intel Sapphire Rapids VMs) that build segfaults in its first decode; a
# portable build (AVX2/FMA/F16C, GGML_NATIVE=OFF) runs everywhere. pip's wheel cache ignores
# CMAKE_ARGS, so the wheel is built once into a cache folder named after the version and flags.
if [[ ",${EXTRAS}," == *",local,"* ]]; then
  LLAMA_VERSION="$(sed -n 's/.*"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml)"
  LLAMA_CMAKE_ARGS="${RLMD_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF}"
  key="$(printf '%s %s' "$LLAMA_VERSION" "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
  wheels="${XDG_CACHE_HOME:-$HOME/.cache}/rlmd/wheels/llama-cpp-python-$key"
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "setup: building llama-cpp-python $LLAMA_VERSION (llama.cpp from source, $LLAMA_CMAKE_ARGS)" \
      "— about 5 min on 2 cores, once; later installs reuse the wheel" >&2
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
      .venv/bin/python -m pip wheel -q --no-deps --no-cache-dir "llama-cpp-python==$LLAMA_VERSION" \
      -w "$wheels.tmp" >&2 &
    build=$!
    # A line every 30 s, so a silent compile does not look like a hang.
    started=$SECONDS
    while kill -0 "$build" 2>/dev/null; do
      for _ in $(seq 30); do kill -0 "$build" 2>/dev/null && sleep 1; done
      if kill -0 "$build" 2>/dev/null; then
        elapsed=$((SECONDS - started))
        printf 'setup: still building llama.cpp (%dm%02ds elapsed)\n' $((elapsed / 60)) $((elapsed % 60)) >&2
      fi
    done
    wait "$build"
    echo "setup: llama-cpp-python built in $((SECONDS - started)) s" >&2
    rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"
  fi
  if [ "$(cat .venv/.llama-build 2>/dev/null)" != "$key" ]; then
    .venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheels"/llama_cpp_python-*.whl \
      2>&1 | { grep -v '^WARNING: Location' || true; } >&2
    echo "$key" > .venv/.llama-build
  fi
fi
# PYTHONWARNINGS reaches the build backend: it hides setuptools' "Editable installation"
# banner (a BuildBackendWarning printed on every install; nothing to act on).
PYTHONWARNINGS="ignore::UserWarning" \
  .venv/bin/python -m pip install -q -e ".[${EXTRAS}]" 2>&1 | { grep -v '^WARNING: Location' || true; } >&2
.venv/bin/rlmd --help >/dev/null
echo "setup: rlmd installed in $(pwd)/.venv (extras: ${EXTRAS})" >&2
