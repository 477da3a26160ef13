"""Where rlmd keeps its state, attacked by another user of the same machine."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from rlmd import paths


@pytest.fixture
def long_home(tmp_path, monkeypatch):
    """An rlmd home whose socket path is too long, no XDG_RUNTIME_DIR, and a private
    stand-in for /tmp: the socket falls back to ``<tmp>/rlmd-<uid>``."""
    home = tmp_path / ("h" * 120)
    monkeypatch.setenv("RLMD_HOME", str(home))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    # short, so the socket path in it fits (pytest's tmp_path may not leave room)
    shared = Path(tempfile.mkdtemp(prefix="rlmd-test-", dir="/tmp"))
    os.chmod(shared, 0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    yield shared / f"rlmd-{os.getuid()}"
    shutil.rmtree(shared, ignore_errors=True)


def test_fallback_socket_folder_is_made_private(long_home):
    sock = paths.socket_path()
    assert sock.parent == long_home
    st = os.lstat(long_home)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    assert stat.S_IMODE(st.st_mode) == 0o700


def test_an_xdg_runtime_dir_too_long_or_relative_is_passed_over(long_home, tmp_path, monkeypatch):
    """Review18: ``$XDG_RUNTIME_DIR`` was taken whatever it was: a long one made a socket path
    over the limit (``rlmd serve``: an "AF_UNIX path too long" traceback), a relative one (an
    invalid value, says the XDG spec) a socket path that depended on the current folder."""
    runtime = tmp_path / ("r" * 90)
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert paths.socket_path().parent == long_home
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "run")
    assert paths.socket_path().parent == long_home
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))  # absolute and short: used
    assert paths.socket_path().parent == tmp_path / "run"


def test_a_temp_folder_too_long_falls_back_to_slash_tmp(long_home, tmp_path, monkeypatch):
    """Session 18 left it: with a long ``$TMPDIR`` as well as a long rlmd home, the fallback
    socket path was still over the limit and ``rlmd serve`` failed to bind."""
    deep = tmp_path / ("t" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    sock = paths.socket_path()
    assert sock.parent == Path("/tmp") / f"rlmd-{os.getuid()}"
    assert len(str(sock).encode()) <= paths.MAX_SOCKET_PATH
    assert not (deep / f"rlmd-{os.getuid()}").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_socket_folder_premade_by_another_user_is_refused(long_home):
    long_home.mkdir()
    os.chmod(long_home, 0o777)
    os.chown(long_home, 65534, 65534)  # nobody made /tmp/rlmd-<uid> first
    with pytest.raises(PermissionError, match="another user"):
        paths.socket_path()
    assert os.lstat(long_home).st_uid == 65534  # left as found, never used


def test_socket_folder_premade_as_a_symlink_is_refused(long_home, tmp_path):
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    long_home.symlink_to(elsewhere)
    with pytest.raises(PermissionError):
        paths.socket_path()


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_commands_refuse_a_socket_folder_of_another_user_with_a_message(long_home):
    import subprocess
    import sys

    long_home.mkdir()
    os.chown(long_home, 65534, 65534)
    env = {**os.environ, "TMPDIR": str(long_home.parent)}
    for args in (["serve", "--idle-timeout", "1"], ["attach", "--stdio", "--no-start"]):
        proc = subprocess.run(
            [sys.executable, "-m", "rlmd.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "another user" in proc.stderr and "Traceback" not in proc.stderr
    assert os.lstat(long_home).st_uid == 65534


def _read_only(folder, *commands: list[str]):
    """Run each rlmd command with ``folder`` mounted read-only (a private mount namespace);
    the finished processes, or a skip where no namespace can be made here."""
    import shlex
    import subprocess
    import sys

    where = shlex.quote(str(folder))
    lines = [f"mount --bind {where} {where} && mount -o remount,bind,ro {where} || exit 97"]
    for i, words in enumerate(commands):
        argv = shlex.join([sys.executable, "-m", "rlmd", *words])
        lines.append(
            f"{argv} </dev/null >{folder}.out{i} 2>{folder}.err{i}; echo $? >{folder}.rc{i}"
        )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", "\n".join(lines)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RLMD_HOME": str(folder / "home"), "COLUMNS": "200"},
    )
    if done.returncode != 0:
        pytest.skip(f"no read-only mount here: {done.stderr.strip()}")
    read = lambda suffix, i: open(f"{folder}.{suffix}{i}").read()  # noqa: E731
    return [(int(read("rc", i)), read("err", i)) for i in range(len(commands))]


@pytest.mark.skipif(os.getuid() != 0, reason="a mount namespace with mount needs root")
def test_a_read_only_rlmd_home_is_one_line_that_says_so(tmp_path):
    """Review17: with the rlmd home on a read-only file system, ``rlmd serve``, ``attach``,
    ``doctor`` and ``models`` ended in an OSError traceback (making ``run/`` or
    ``models/``), and ``rlmd runs`` said to move the store aside "and rlmd starts a new
    one", which a read-only folder cannot do. Each now says the folder cannot be written."""
    from rlmd.store import Store

    folder = tmp_path / "ro"
    (folder / "home").mkdir(parents=True)
    Store(folder / "home" / "rlmd.db").close()
    commands = [
        ["serve"],
        ["attach", "--stdio", "--no-start"],
        ["doctor", "--no-sandboxes"],
        ["models"],
        ["runs"],
    ]
    for words, (code, stderr) in zip(commands, _read_only(folder, *commands), strict=True):
        assert code == 2 and "Traceback" not in stderr, (words, stderr)
        assert "Read-only file system" in stderr or "not writable" in stderr, (words, stderr)
        assert "Set RLMD_HOME to a writable folder" in stderr and "Move it aside" not in stderr


def test_a_folder_where_the_socket_goes_is_one_line_naming_it(tmp_path):
    """Review17: a folder at ``run/rlmd.sock`` ended ``rlmd serve`` in an IsADirectoryError
    traceback; it is one line naming the path and what to do."""
    import subprocess
    import sys

    (tmp_path / "run" / "rlmd.sock").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-m", "rlmd", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RLMD_HOME": str(tmp_path)},
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "Is a directory" in done.stderr and "Move that path aside" in done.stderr


def test_a_file_where_the_rlmd_home_goes_is_said_to_be_no_folder(tmp_path):
    """Review18: ``RLMD_HOME=FILE rlmd runs`` said "[Errno 17] File exists: ... Set
    RLMD_HOME to a writable folder" (the file is there, it is not a folder), and a file
    above it "[Errno 20] Not a directory"; both now name the path that is a file."""
    import subprocess
    import sys

    (tmp_path / "home").write_text("")
    for home in (tmp_path / "home", tmp_path / "home" / "sub"):
        done = subprocess.run(
            [sys.executable, "-m", "rlmd", "runs"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "RLMD_HOME": str(home)},
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        said = f"the rlmd home {home} cannot be made: {tmp_path / 'home'} is a file"
        assert said in " ".join(done.stderr.split()), done.stderr
