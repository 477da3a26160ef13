#!/usr/bin/env bash
# Make ./.venv-verifiers: verifiers 0.4.0 and rlmd from this checkout (editable), for the
# verifiers environment rlmd.train.verifiers_env and its test (docs/training.md).
# A venv of its own because verifiers 0.4.0 pins mcp==2.0.0 and rlmd's `mcp` extra needs
# mcp>=2.3,<3: rlmd goes in without that extra (and without the others: the environment
# needs only the core package). Idempotent: when the stamp matches and the venv's rlmd is this
# checkout, it returns at once (no import: importing verifiers takes seconds).
# Prints nothing on stdout; exits non-zero if the venv cannot be made.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV=.venv-verifiers
REQS=("verifiers==0.4.0" "pytest>=8" "pytest-asyncio>=1.0" "pytest-timeout>=2.3")
# Reinstall when the requirements or rlmd's own dependencies change.
stamp="$(printf '%s\n' "${REQS[@]}" | cat - pyproject.toml | sha256sum | cut -c1-16)"
here="$(pwd)/rlmd/__init__.py"
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$stamp" ] && [ "$("$VENV/bin/python" -c \
  'import importlib.util as u; print(u.find_spec("rlmd").origin if u.find_spec("verifiers") else "")' \
  2>/dev/null)" = "$here" ]; then
  exit 0
fi
# Not ready until the end: a run that fails midway must not leave a stamp that an
# earlier run wrote and that matches again later (after a checkout goes back).
rm -f "$VENV/.stamp"
# A venv without pip (python3-venv was missing: `venv` made bin/python, then ensurepip
# failed) is made again, so installing python3-venv and rerunning is enough.
"$VENV/bin/python" -m pip --version >/dev/null 2>&1 || "$PY" -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | { grep -v '^WARNING: Location' || true; } >&2
# PYTHONWARNINGS reaches the build backend: it hides setuptools' "Editable installation" banner.
PYTHONWARNINGS="ignore::UserWarning" \
  "$VENV/bin/python" -m pip install -q "${REQS[@]}" -e . 2>&1 |
  { grep -v '^WARNING: Location' || true; } >&2
"$VENV/bin/python" -c "import verifiers.v1, rlmd"
echo "$stamp" > "$VENV/.stamp"
echo "verifiers-venv: $(pwd)/$VENV ready (verifiers 0.4.0, rlmd without the mcp extra)" >&2
