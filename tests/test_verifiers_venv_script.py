"""scripts/verifiers-venv.sh when things go wrong: a venv left without pip by a failed
``python3 -m venv`` and an install that fails midway. Each case runs a copy of the script
in a scratch checkout (the script works on the checkout it sits in); pip is kept offline
(``PIP_NO_INDEX``), so nothing is downloaded and the install itself fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    co = tmp_path / "co"
    (co / "scripts").mkdir(parents=True)
    (co / "rlmd").mkdir()
    (co / "rlmd" / "__init__.py").write_text("")
    shutil.copy(ROOT / "scripts" / "verifiers-venv.sh", co / "scripts")
    shutil.copy(ROOT / "pyproject.toml", co)
    return co


def run_script(co: Path, **env: str) -> subprocess.CompletedProcess[str]:
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(
        ["bash", str(co / "scripts" / "verifiers-venv.sh")],
        env={**os.environ, **offline, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_venv_left_without_pip_is_made_again(checkout: Path, tmp_path: Path) -> None:
    # Debian's python3 without python3-venv: `venv` makes bin/python, then ensurepip fails.
    # A rerun once it is installed used to keep that venv and fail "No module named pip".
    base = sys.executable
    no_venv = write_exe(
        tmp_path / "python-no-ensurepip",
        f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        f"  for dir; do :; done  # the last argument\n"
        f'  "{base}" -m venv --without-pip "$dir"; echo "ensurepip is not available" >&2; exit 1\n'
        f'fi\nexec "{base}" "$@"\n',
    )
    first = run_script(checkout, PYTHON=str(no_venv))
    venv_python = checkout / ".venv-verifiers" / "bin" / "python"
    assert first.returncode != 0 and "ensurepip is not available" in first.stderr
    assert venv_python.exists()

    again = run_script(checkout, PYTHON=base)
    assert again.returncode != 0  # offline: verifiers cannot be installed here
    assert "No module named pip" not in again.stderr, again.stderr
    assert (
        subprocess.run([venv_python, "-m", "pip", "--version"], capture_output=True).returncode == 0
    )
    assert not (checkout / ".venv-verifiers" / ".stamp").exists()


def test_an_install_that_fails_midway_never_leaves_the_venv_looking_ready(
    checkout: Path,
) -> None:
    # A stand-in venv python whose pip install fails when FAIL_PIP=1 (the rest answers as a
    # ready venv would): a stamp written by an earlier good run must not survive a failed
    # one, or going back to that checkout said "ready" over a half-done install.
    here = checkout / "rlmd" / "__init__.py"
    write_exe(
        checkout / ".venv-verifiers" / "bin" / "python",
        '#!/bin/sh\ncase "$*" in\n'
        f'  *find_spec*) echo "{here}" ;;\n'
        '  *"pip install"*) exit "${FAIL_PIP:-0}" ;;\n'
        "esac\nexit 0\n",
    )
    stamp = checkout / ".venv-verifiers" / ".stamp"
    assert run_script(checkout).returncode == 0 and stamp.exists()  # a good run: ready
    assert run_script(checkout, FAIL_PIP="1").returncode == 0  # ready: nothing to install

    pyproject = checkout / "pyproject.toml"
    original = pyproject.read_text()
    pyproject.write_text(original + "\n# a dependency changed\n")
    assert run_script(checkout, FAIL_PIP="1").returncode != 0  # the reinstall fails
    pyproject.write_text(original)  # the checkout goes back
    back = run_script(checkout, FAIL_PIP="1")
    assert back.returncode != 0, "a half-done install was taken as ready"
    assert not stamp.exists()
