#!/usr/bin/env bash
# The hostile suite again as a normal user (issue 11): the sandbox's namespaces, limits and
# working folders, and the store, as someone without root, cgroups or mounts. Run as root
# after scripts/setup.sh (scripts/test.sh calls it); it creates the user if missing.
# Usage: scripts/test-nonroot.sh [pytest args]   (default: the hostile test files)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test-nonroot: run as root (it creates the test user and hands it a copy of the tree)" >&2
  exit 2
fi
TEST_USER="${RLMD_NONROOT_USER:-rlmd-ci}"
if ! id "$TEST_USER" >/dev/null 2>&1; then
  useradd --system --create-home --home-dir "/var/lib/$TEST_USER" --shell /usr/sbin/nologin \
    "$TEST_USER"
fi
USER_HOME="$(getent passwd "$TEST_USER" | cut -d: -f6)"
as_user() { runuser -u "$TEST_USER" -- "$@"; }

# An interpreter of the venv's Python version that the user can run: the venv's own base if
# it is reachable (a pyenv build under root's 0700 home is not), else the system's.
VENV_PY="${RLMD_VENV:-$(pwd)/.venv}/bin/python"
VER="$("$VENV_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
SITE="$("$VENV_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
BASE="$(readlink -f "$("$VENV_PY" -c 'import sys; print(sys._base_executable)')")"
PY=""
for cand in "$BASE" "/usr/bin/python$VER" "/usr/local/bin/python$VER"; do
  if [ -x "$cand" ] && as_user "$cand" -c \
      "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$VER'.split('.'))))" \
      2>/dev/null; then
    PY="$cand"
    break
  fi
done
if [ -z "$PY" ]; then
  echo "test-nonroot: no Python $VER that $TEST_USER can run (apt-get install python$VER)" >&2
  exit 2
fi

# A copy of the tree the user owns (the clone may lie in root's home), and a venv of its own
# that reads the packages of ours (same Python version: compiled extensions load as they are).
WORK="$(mktemp -d /var/tmp/rlmd-nonroot-XXXXXX)"
trap 'umount "$WORK/site" 2>/dev/null || true; rm -rf "$WORK"' EXIT
tar -c --exclude=.venv --exclude=.git --exclude='__pycache__' rlmd tui tests bench pyproject.toml \
  | tar -x -C "$WORK"
chown -R "$TEST_USER": "$WORK"
chmod 0755 "$WORK"
if ! as_user test -r "$SITE" -a -x "$SITE"; then
  # The clone lies under a private folder (root's home): show the user the packages through
  # a read-only bind mount instead of opening that folder.
  mkdir "$WORK/site"
  mount --bind "$SITE" "$WORK/site" && mount -o remount,bind,ro "$WORK/site"
  SITE="$WORK/site"
fi
as_user "$PY" -m venv --without-pip "$WORK/venv"
USER_SITE="$(as_user "$WORK/venv/bin/python" -c \
  'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "import site; site.addsitedir('$SITE')" >"$USER_SITE/rlmd-test-packages.pth"

FILES=("$@")
if [ ${#FILES[@]} = 0 ]; then
  FILES=(tests/test_sandbox_hostile.py tests/test_store_locks.py tests/test_engine_cell_time.py
    tests/test_engine_untrusted.py tests/test_server_auth.py)
fi
echo "test-nonroot: ${FILES[*]} as $TEST_USER (uid $(id -u "$TEST_USER")) with $PY" >&2
cd "$WORK"
as_user env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$USER_HOME" LANG=C.UTF-8 \
  TMPDIR=/tmp PYTHONPATH="$WORK:$WORK/tui" \
  RLMD_EXPECT_ISOLATION="${RLMD_EXPECT_ISOLATION:-}" RLMD_EXPECT_NONROOT=1 \
  "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "${FILES[@]}"
