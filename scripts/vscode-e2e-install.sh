#!/usr/bin/env bash
# Install what the VS Code extension's real-workbench test needs (idempotent, cached):
# Debian chromium + ripgrep + build headers, code-server into a cache folder keyed by version.
# Prints the code-server binary path on stdout's last line.
set -euo pipefail
CS_VERSION="${RLMD_CODE_SERVER_VERSION:-4.100.3}"
CACHE="${RLMD_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlmd-vscode-e2e}"
CS_DIR="$CACHE/code-server-$CS_VERSION"
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v rg >/dev/null || need+=(ripgrep)
for p in libkrb5-dev libxkbfile-dev libsecret-1-dev pkg-config; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  echo "apt-get install ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >&2
fi
BIN="$CS_DIR/node_modules/.bin/code-server"
if [ ! -f "$CS_DIR/.installed" ]; then
  echo "installing code-server $CS_VERSION into $CS_DIR" >&2
  rm -rf "$CS_DIR"; mkdir -p "$CS_DIR"
  # @vscode/ripgrep's postinstall downloads rg from GitHub (unreachable): seed its cache with
  # Debian's rg instead.
  C="$(node -p 'require("os").tmpdir()')/vscode-ripgrep-cache-1.15.11"; mkdir -p "$C"
  T="$C/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"
  [ -f "$T" ] || tar -C "$(dirname "$(command -v rg)")" -czf "$T" rg
  (cd "$CS_DIR" && echo '{"name":"cs","private":true}' > package.json &&
    npm_config_yes=true npm_config_unsafe_perm=true npm install --no-audit --no-fund \
      "code-server@$CS_VERSION" --foreground-scripts >&2)
  "$BIN" --config /dev/null --version >&2 2>/dev/null || true
  touch "$CS_DIR/.installed"
fi
echo "$BIN"
