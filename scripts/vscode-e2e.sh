#!/usr/bin/env bash
# The VS Code extension's tests: the protocol layer against a real daemon (node --test), then
# (unless RLMD_VSCODE_E2E=0) the real workbench: the .vsix installed into code-server and
# driven by playwright-core in Debian's Chromium. Installs what it needs (cached, idempotent).
# Screenshots: clients/vscode/test-artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
PY="${RLMD_PYTHON:-$REPO/.venv/bin/python}"
cd clients/vscode
# npm ci only when the lockfile changed since the last install
STAMP=node_modules/.rlmd-lock.sha
SUM="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$SUM" ]; then
  npm ci --no-audit --no-fund
  echo "$SUM" > "$STAMP"
fi
npx tsc --noEmit -p .
node build.mjs
RLMD_PYTHON="$PY" node --test out/test/
if [ "${RLMD_VSCODE_E2E:-1}" = "0" ]; then
  echo "vscode: workbench tests SKIPPED (RLMD_VSCODE_E2E=0); the protocol tests ran" >&2
  exit 0
fi
CS="$(bash "$REPO/scripts/vscode-e2e-install.sh" | tail -n1)"
npx vsce package --no-dependencies --allow-missing-repository --skip-license -o rlmd.vsix >/dev/null
node test-e2e/workbench.mjs "$CS" "$(pwd)/rlmd.vsix" "$PY" "$REPO"
