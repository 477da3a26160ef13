"""``rlmd ask`` end to end: a real ``rlmd`` process asking a real daemon over its Unix socket
(the scripted model), checked against what the daemon and its store say.

No timing assumptions: every wait is on a condition (a line on the command's stderr, a task
the daemon lists), with generous deadlines; the scripted model's ``gate`` holds a run in a
model call for exactly as long as a test needs.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from helpers.server import CELLS, Daemon, make_project, question

from rlmd.cli.ask import NOT_CARRIED
from rlmd.cli.ending import JSON_KEYS
from rlmd.server.client import Client

pytestmark = pytest.mark.timeout(300)

WAIT_S = 120.0
"""Deadline of every wait on a condition (they end as soon as it holds)."""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("home"), "--idle-timeout", "0").start()
    yield d
    d.stop()


class Ask:
    """A running ``rlmd ask`` process; its stderr is read as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.err = ""
        self._reader = asyncio.create_task(self._read_err())
        self._out = asyncio.create_task(proc.stdout.read())  # type: ignore[union-attr]

    async def _read_err(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.err += line.decode("utf-8", "replace")

    async def stderr_has(self, text: str) -> None:
        """Wait until ``text`` is on the command's stderr (fails if it ends without it)."""
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while text not in self.err:
            if self._reader.done() or asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{text!r} never came on stderr:\n{self.err}")
            await asyncio.sleep(0.02)

    async def result(self) -> tuple[int, str, str]:
        """Exit code, stdout, stderr once the command ended."""
        code = await asyncio.wait_for(self.proc.wait(), WAIT_S)
        out = await self._out
        await self._reader
        return code, out.decode("utf-8", "replace"), self.err


async def start_ask(*args: str, home: Path, cwd: Path | None = None) -> Ask:
    env = {**os.environ, "RLMD_HOME": str(home), "COLUMNS": "200"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rlmd",
        "ask",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return Ask(proc)


async def ask(*args: str, home: Path, cwd: Path | None = None) -> tuple[int, str, str]:
    """``rlmd ask ARGS`` to its end: exit code, stdout, stderr."""
    return await (await start_ask(*args, home=home, cwd=cwd)).result()


async def until(check, what: str):
    """Poll the coroutine function ``check`` until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def run_id_of(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if x.startswith("trajectory: rlmd show "))
    return line.split()[3]


async def test_the_answer_comes_on_stdout_and_the_next_ask_sees_the_workspace_warm(
    daemon, tmp_path
):
    project = make_project(tmp_path)
    code, out, err = await ask(
        question("marker = 41\nprint(marker)", "FINAL(str(marker))"),
        "--model",
        CELLS,
        home=daemon.home,
        cwd=project,  # the workspace is the current folder by default
    )
    assert code == 0, err
    assert out == "41\n"
    run_id = run_id_of(err)
    assert f"▶ run {run_id} · depth 0" in err  # rlmd run's progress, on stderr
    assert "■ completed (FINAL accepted)" in err
    assert f"(store {daemon.home / 'rlmd.db'})" in err

    # a second ask, from elsewhere with -w, runs in the same REPL: the variable is there
    code, out, err = await ask(
        question("print(marker + 1)\nFINAL(str(marker + 1))"),
        "-w",
        str(project),
        "-m",
        CELLS,
        "--quiet",
        home=daemon.home,
        cwd=tmp_path,
    )
    assert code == 0, err
    assert out == "42\n"
    assert "▶ run" not in err and "trajectory: rlmd show" in err  # --quiet

    client = await daemon.client()
    try:
        stored = await client.command("rlmd.runs.get", {"run_id": run_id})
    finally:
        await client.close()
    assert stored["run"]["answer"] == "41"
    assert stored["run"]["workspace"] == str(project.resolve())


async def test_json_is_one_object_shaped_like_rlmd_run_json(daemon, tmp_path):
    project = make_project(tmp_path)
    code, out, err = await ask(
        question("print('ok')\nFINAL('ok')"),
        "-w",
        str(project),
        "-m",
        CELLS,
        "--json",
        "--max-iterations",
        "4",
        home=daemon.home,
    )
    assert code == 0, err
    obj = json.loads(out)  # the whole of stdout is one JSON object
    assert list(obj) == [*JSON_KEYS, "store", "workspace", "notes"]
    assert obj["status"] == "completed" and obj["answer"] == "ok"
    assert obj["answer_source"] == "final" and obj["iterations"] == 1
    assert obj["error"] is None and obj["vote"] is None and obj["notes"] == []
    assert obj["store"] == str(daemon.home / "rlmd.db")
    assert obj["workspace"] == str(project.resolve())
    assert "trajectory: rlmd show" not in err  # as rlmd run --json

    client = await daemon.client()
    try:
        stored = (await client.command("rlmd.runs.get", {"run_id": obj["run_id"]}))["run"]
    finally:
        await client.close()
    assert obj["usage"] == stored["usage"]  # the tree's usage, as rlmd run --json has it
    assert stored["budget"]["max_iterations"] == 4  # the flag reached the task

    # rlmd run --json has the same keys (less the two a workspace adds)
    responses = tmp_path / "run.json"
    responses.write_text(json.dumps(["```repl\nprint(context)\nFINAL('abc')\n```"]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rlmd",
        "run",
        "q",
        "--context",
        "-",
        "--model",
        f"scripted:{responses}",
        "--json",
        env={**os.environ, "RLMD_HOME": str(tmp_path / "run-home")},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    run_out, run_err = await asyncio.wait_for(proc.communicate(b"abc"), WAIT_S)
    assert proc.returncode == 0, run_err
    assert list(json.loads(run_out)) == [k for k in obj if k not in ("workspace", "notes")]


@pytest.mark.parametrize("attr", sorted(NOT_CARRIED))
async def test_a_run_flag_the_daemon_cannot_carry_is_refused_by_name(daemon, tmp_path, attr):
    flag, _ = NOT_CARRIED[attr]
    value = {"--no-extraction": [], "--cluster": [], "--samples": ["2"]}.get(flag, ["1"])
    client = await daemon.client()
    try:
        before = (await client.command("rlmd.health"))["tasks"]["started"]
        code, out, err = await ask(
            "q", "-w", str(tmp_path), "-m", CELLS, flag, *value, home=daemon.home
        )
        after = (await client.command("rlmd.health"))["tasks"]["started"]
    finally:
        await client.close()
    assert code == 2 and out == ""
    assert f"error: rlmd ask cannot pass {flag} to the daemon" in err
    assert "rlmd run" in err  # says where the flag does work
    assert after == before  # refused before the daemon was asked


async def test_the_daemons_refusal_is_printed(daemon, tmp_path):
    project = make_project(tmp_path)
    code, out, err = await ask(
        "q", "-w", str(project), "-m", CELLS, "--sandbox", "inprocess", home=daemon.home
    )
    assert code == 2 and out == ""
    assert "the rlmd daemon refused the task: the 'inprocess' sandbox runs model code" in err

    # a busy workspace: refused with --no-queue, waited for without it
    gate = tmp_path / "gate"
    client = await daemon.client()
    try:
        held = await client.command(
            "rlmd.task.start",
            {"workspace": str(project), "question": question(gate=gate), "models": {"root": CELLS}},
        )
        code, out, err = await ask(
            question("FINAL('after')"),
            "-w",
            str(project),
            "-m",
            CELLS,
            "--no-queue",
            home=daemon.home,
        )
        assert code == 2 and out == ""
        assert f"the rlmd daemon refused the task: workspace {project.resolve()} is busy" in err

        queued = await start_ask(
            question("print('after')\nFINAL('after')"),
            "-w",
            str(project),
            "-m",
            CELLS,
            home=daemon.home,
        )
        await queued.stderr_has("waiting for the workspace: 1 task ahead of this one")
        gate.touch()  # the held task ends; the queued ask runs
        code, out, err = await queued.result()
        assert code == 0, err
        assert out == "after\n"
        status = await client.command("rlmd.task.status", {"run_id": held["run_id"]})
        assert status["status"] == "completed"
    finally:
        gate.touch()
        await client.close()


async def test_ctrl_c_in_line_cancels_the_queued_task_and_draws_no_none(daemon, tmp_path):
    """A task cancelled in line never reached the engine: its run has no model and no
    context, and the progress line said ``model None · context None · 0 chars``."""
    project = make_project(tmp_path)
    gate = tmp_path / "gate"
    client = await daemon.client()
    try:
        held = await client.command(
            "rlmd.task.start",
            {"workspace": str(project), "question": question(gate=gate), "models": {"root": CELLS}},
        )
        queued = await start_ask("q", "-w", str(project), "-m", CELLS, home=daemon.home)
        await queued.stderr_has("waiting for the workspace: 1 task ahead of this one")
        queued.proc.send_signal(signal.SIGINT)
        code, out, err = await queued.result()
        assert code == 130 and out == "", err
        assert "■ cancelled" in err and "the task was cancelled before it started" in err
        assert "None" not in err, err
        run_id = run_id_of(err)
        assert f"▶ run {run_id} · depth 0 · never reached the engine" in err
        status = await client.command("rlmd.task.status", {"run_id": held["run_id"]})
        assert status["state"] == "running"  # the task ahead is not touched
    finally:
        gate.touch()
        await client.close()


async def test_ctrl_c_cancels_the_task_and_leaves_the_daemon_and_workspace_up(daemon, tmp_path):
    project = make_project(tmp_path)
    code, out, err = await ask(
        question("keep = 7\nprint(keep)", "FINAL(str(keep))"),
        "-w",
        str(project),
        "-m",
        CELLS,
        home=daemon.home,
    )
    assert code == 0 and out == "7\n", err

    held = await start_ask(
        question(gate=tmp_path / "never"),  # its model call waits for a file nobody makes
        "-w",
        str(project),
        "-m",
        CELLS,
        home=daemon.home,
    )
    await held.stderr_has("iteration 1")  # the task runs (its first model call waits)
    held.proc.send_signal(signal.SIGINT)
    code, out, err = await held.result()
    assert code == 130, err
    assert out == ""
    run_id = run_id_of(err)
    assert f"cancelling run {run_id}" in err
    assert "■ cancelled" in err and "no answer (cancelled" in err

    client = await daemon.client()
    try:
        status = await client.command("rlmd.task.status", {"run_id": run_id})
        assert status["state"] == "finished" and status["status"] == "cancelled"
        health = await client.command("rlmd.health")
        assert health["ok"] is True and health["tasks"]["running"] == 0
        # the workspace kept its REPL: the variable the first ask set is still there
        variables = await client.command("rlmd.workspace.variables", {"workspace": str(project)})
    finally:
        await client.close()
    assert "keep" in {v["name"] for v in variables["variables"]}
    assert daemon.alive


async def test_a_cancel_the_daemon_never_answers_is_said_so_and_ctrl_c_again_ends(tmp_path):
    """A daemon stopped or stuck after the task started: the cancel timed out and ask said
    ``the daemon did not take the cancel: `` with nothing after it (a TimeoutError's str).
    Here the daemon's rlmd.task.cancel never returns, and ask's wait for it is cut to 1 s."""
    home = tmp_path / "home"
    home.mkdir()
    stuck = (
        "import asyncio\nfrom rlmd.server import commands\n"
        "async def never(core, p, ctx):\n    await asyncio.Event().wait()\n"
        "commands.COMMANDS['rlmd.task.cancel'] = never\n"
    )
    d = Daemon(home, "--idle-timeout", "0", prelude=stuck).start()
    short = (
        "import rlmd.frontdoors.link as link\n"
        "command = link.DaemonLink.command\n"
        "async def short(self, name, params=None, *, timeout=60.0):\n"
        "    if name == 'rlmd.task.cancel':\n        timeout = 1.0\n"
        "    return await command(self, name, params, timeout=timeout)\n"
        "link.DaemonLink.command = short\n"
        "import sys\nfrom rlmd.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            short,
            "ask",
            question(gate=tmp_path / "gate"),
            "-w",
            str(make_project(tmp_path)),
            "-m",
            CELLS,
            env={**os.environ, "RLMD_HOME": str(home), "COLUMNS": "200"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        held = Ask(proc)
        await held.stderr_has("iteration 1")
        proc.send_signal(signal.SIGINT)
        await held.stderr_has("the daemon did not")
        proc.send_signal(signal.SIGINT)
        code, out, err = await held.result()
    finally:
        (tmp_path / "gate").touch()
        d.stop()
    assert code == 130 and out == "", err
    said = next(line for line in err.splitlines() if "the daemon did not" in line)
    assert said.rstrip().endswith("press Ctrl-C again to stop waiting)"), said
    assert "stopped waiting" in err


TWO_GATES = """
import asyncio, os

async def respond(messages):
    turn = sum(1 for m in messages if m["role"] == "assistant")
    gate = os.path.join(os.path.dirname(__file__), "first" if turn == 0 else "second")
    while not os.path.exists(gate):
        await asyncio.sleep(0.02)
    return "```repl\\nprint('turn', %d)\\n```" % turn
"""
"""A scripted model whose first reply waits for the file ``first`` and every later one for
``second`` (both next to it)."""


async def test_an_ask_that_dies_mid_task_cancels_its_task(daemon, tmp_path):
    """``rlmd ask Q 2>&1 | head -1``: the reader went away, the next progress line was a
    BrokenPipeError and ask exited 1, but its task ran on in the daemon to its end (holding
    the workspace, spending tokens) with nobody to read the answer."""
    model = tmp_path / "two_gates.py"
    model.write_text(TWO_GATES)
    read_end, write_end = os.pipe()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rlmd",
        "ask",
        "q",
        "-w",
        str(make_project(tmp_path)),
        "-m",
        f"scripted:{model}:respond",
        env={**os.environ, "RLMD_HOME": str(daemon.home), "COLUMNS": "200"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=write_end,
    )
    os.close(write_end)

    def first_lines() -> str:  # up to "iteration 1", as head would
        seen = b""
        while b"iteration 1" not in seen:
            chunk = os.read(read_end, 4096)
            assert chunk, seen
            seen += chunk
        return seen.decode()

    err = await asyncio.wait_for(asyncio.to_thread(first_lines), WAIT_S)
    run_id = err.split("▶ run ", 1)[1].split()[0]
    os.close(read_end)  # the reader goes away
    (tmp_path / "first").touch()  # the next progress lines meet a closed pipe
    code = await asyncio.wait_for(proc.wait(), WAIT_S)
    assert code == 1
    client = await daemon.client()
    try:
        status = await client.command("rlmd.task.status", {"run_id": run_id})
        assert status["cancel_requested"] is True, status
        done = await until(lambda: _finished_status(client, run_id), f"run {run_id} to finish")
    finally:
        (tmp_path / "second").touch()
        await client.close()
    assert done["status"] == "cancelled", done


async def _finished_status(client: Client, run_id: str):
    status = await client.command("rlmd.task.status", {"run_id": run_id})
    return status if status["state"] == "finished" else None


async def test_a_closed_terminal_cancels_the_task_and_ask_ends(daemon, tmp_path):
    """The terminal window closed mid-task: SIGHUP, and stderr a hung-up tty (EIO). The
    handler printed "cancelling run ..." before it sent the cancel; the print raised, so
    the cancel never went, the task ran on and ask waited for it with no terminal."""
    import pty

    controller, terminal = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rlmd",
        "ask",
        question(gate=tmp_path / "never"),
        "-w",
        str(make_project(tmp_path)),
        "-m",
        CELLS,
        env={**os.environ, "RLMD_HOME": str(daemon.home), "COLUMNS": "200"},
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)

    def until_iteration() -> str:
        seen = b""
        while b"iteration 1" not in seen:
            chunk = os.read(controller, 4096)
            assert chunk, seen
            seen += chunk
        return seen.decode("utf-8", "replace")

    seen = await asyncio.wait_for(asyncio.to_thread(until_iteration), WAIT_S)
    run_id = re.sub(r"\x1b\[[0-9;]*m", "", seen).split("▶ run ", 1)[1].split()[0]
    os.close(controller)  # the window closes: the tty hangs up
    proc.send_signal(signal.SIGHUP)
    await asyncio.wait_for(proc.wait(), WAIT_S)
    client = await daemon.client()
    try:
        done = await until(lambda: _finished_status(client, run_id), f"run {run_id} to finish")
    finally:
        await client.close()
    assert done["status"] == "cancelled", done


async def test_a_daemon_that_is_not_running_is_started(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    project = make_project(tmp_path)
    code, out, err = await ask("q", "-w", str(project), "-m", CELLS, "--no-start", home=home)
    assert code == 2 and out == ""
    assert "no rlmd daemon listens on" in err

    pid_file = home / "run" / "daemon.pid"
    try:
        code, out, err = await ask(
            question("print('up')\nFINAL('up')"),
            "-w",
            str(project),
            "-m",
            CELLS,
            "--start-timeout",
            str(WAIT_S),
            home=home,
        )
        assert code == 0, err
        assert out == "up\n"
        client = await Client.connect(home / "run" / "rlmd.sock")
        try:
            health = await client.command("rlmd.health")
        finally:
            await client.close()
        assert health["ok"] and health["home"] == str(home)
        assert health["tasks"]["finished"] == 1
    finally:
        await _stop_started_daemon(pid_file)


async def _stop_started_daemon(pid_file: Path) -> None:
    """SIGTERM the daemon ``rlmd ask`` started (it outlives the command) and wait for it."""
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().strip())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return

    async def gone() -> bool:  # not our child: a zombie waiting for init counts as gone
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
        except OSError:
            return True

    await until(gone, f"the started daemon {pid} to stop")


async def test_a_workspace_that_is_no_folder_is_bad_usage(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    code, out, err = await ask("q", "-w", str(tmp_path / "nope"), home=home)
    assert code == 2 and out == ""
    assert f"error: --workspace: no such folder: {tmp_path / 'nope'}" in err
    (tmp_path / "file.txt").write_text("x")
    code, out, err = await ask("q", "--workspace", str(tmp_path / "file.txt"), home=home)
    assert code == 2 and f"--workspace {tmp_path / 'file.txt'} is not a folder" in err
    assert not (home / "run" / "rlmd.sock").exists()  # no daemon was started for a typo


async def test_a_symlink_loop_or_a_deleted_current_folder_is_bad_usage(tmp_path):
    """Both made ``Path.resolve()`` raise (RuntimeError, FileNotFoundError): a traceback."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    code, out, err = await ask("q", "-w", str(tmp_path / "a"), home=home)
    assert code == 2 and out == "", err
    assert "Traceback" not in err
    assert f"error: --workspace {tmp_path / 'a'}: " in err and "symbolic links" in err
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = await asyncio.create_subprocess_exec(  # cd gone && rmdir ../gone && rlmd ask q
        "/bin/sh",
        "-c",
        f'cd "$1" && rmdir "$1" && exec "{sys.executable}" -m rlmd ask q',
        "sh",
        str(gone),
        env={**os.environ, "RLMD_HOME": str(home), "COLUMNS": "200"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out_b, err_b = await asyncio.wait_for(proc.communicate(), WAIT_S)
    err = err_b.decode()
    assert proc.returncode == 2 and out_b == b"", err
    assert "Traceback" not in err
    assert "error: the current folder is gone" in err
    assert not (home / "run" / "rlmd.sock").exists()  # no daemon was started


async def test_a_closed_stdout_is_refused_before_the_daemon_is_asked(tmp_path):
    """``rlmd ask Q >&-`` ran the whole task, then lost the answer in a traceback."""
    home = tmp_path / "home"
    home.mkdir()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rlmd",
        "ask",
        "q",
        "-w",
        str(make_project(tmp_path)),
        env={**os.environ, "RLMD_HOME": str(home)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509 - the child's stdout, closed
    )
    _, err_b = await asyncio.wait_for(proc.communicate(), WAIT_S)
    err = err_b.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert "error: stdout is closed" in err
    assert not (home / "run" / "rlmd.sock").exists()  # no daemon, no task


async def test_a_daemon_that_accepts_but_never_answers_is_named_not_a_blank_error(tmp_path):
    """A stopped (SIGSTOP) or wedged daemon: the socket accepts, rlmd.subscribe times out.
    TimeoutError is an OSError, so ask said ``cannot reach the rlmd daemon: `` and nothing
    more. Here the daemon's socket is a listener that never replies, and the ask's own
    60 s wait is cut to 1 s (so the test does not wait a minute)."""
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True, mode=0o700)
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_unix_server(silent, path=str(home / "run" / "rlmd.sock"))
    prelude = (
        "import rlmd.frontdoors.link as link\n"
        "command = link.DaemonLink.command\n"
        "async def short(self, name, params=None, *, timeout=60.0):\n"
        "    return await command(self, name, params, timeout=1.0)\n"
        "link.DaemonLink.command = short\n"
        "import sys\nfrom rlmd.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            prelude,
            "ask",
            "q",
            "-w",
            str(make_project(tmp_path)),
            env={**os.environ, "RLMD_HOME": str(home), "COLUMNS": "200"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out_b, err_b = await asyncio.wait_for(proc.communicate(), WAIT_S)
    finally:
        server.close()
        for writer in held:
            writer.close()
    err = err_b.decode()
    assert proc.returncode == 2 and out_b == b"", err
    assert "did not answer" in err and str(home / "run" / "rlmd.sock") in err, err


async def test_a_daemon_stopped_mid_task_says_so_not_that_the_task_was_cancelled(tmp_path):
    """``rlmd serve`` stopped (SIGTERM) while an ask's task ran: the daemon cancels its tasks
    on the way out, and ask said ``cancelled: the task was cancelled`` as if someone had
    cancelled it from the TUI."""
    (tmp_path / "home-stops").mkdir()
    d = Daemon(tmp_path / "home-stops").start()
    try:
        held = await start_ask(
            question(gate=tmp_path / "never"),
            "-w",
            str(make_project(tmp_path)),
            "-m",
            CELLS,
            home=d.home,
        )
        await held.stderr_has("iteration 1")
        d.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        code, out, err = await held.result()
    finally:
        d.stop()
    assert code == 1 and out == "", err
    assert "no answer (cancelled: the rlmd daemon was stopped" in err, err


async def test_a_daemon_that_dies_mid_task_is_a_clear_error(tmp_path):
    (tmp_path / "home-dies").mkdir()
    d = Daemon(tmp_path / "home-dies").start()
    try:
        project = make_project(tmp_path)
        held = await start_ask(
            question(gate=tmp_path / "never"),
            "-w",
            str(project),
            "-m",
            CELLS,
            home=d.home,
        )
        await held.stderr_has("iteration 1")
        d.kill()  # SIGKILL, as a crash
        code, out, err = await held.result()
    finally:
        d.stop()
    assert code == 1 and out == ""
    assert "error: lost the rlmd daemon while run" in err
    assert "rlmd show" in err
