"""The `rlmd` command as a user runs it: a real process, a scripted model file, a real store."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from helpers.cli import rlmd

from rlmd.sandbox.process.launch import children


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "rules": [{"match": "^sub:", "response": "SUBANSWER"}],
                "responses": [
                    "```repl\nhits = grep(r'class Engine')\nprint(hits)\nprint(llm_query('sub: where?'))\n```",
                    "```repl\nFINAL(hits[0].split(':')[0])\n```",
                ],
            }
        )
    )
    return path


def test_run_json_then_runs_show_export(rlmd_home, codebase, script, tmp_path):
    proc = rlmd(
        "run",
        "Where is Engine defined?",
        "--context",
        str(codebase),
        "--model",
        f"scripted:{script}",
        "--json",
        home=rlmd_home,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "completed" and out["answer"] == "pkg/core.py"
    assert out["usage"]["total"]["calls"] == 3  # two root turns + one sub-call
    assert "iteration 2" in proc.stderr and "sub call" in proc.stderr

    runs = rlmd("runs", "--json", home=rlmd_home)
    listed = json.loads(runs.stdout)
    assert [r["id"] for r in listed] == [out["run_id"]]

    show = rlmd("show", out["run_id"][:10], home=rlmd_home)
    assert show.returncode == 0, show.stderr
    assert "pkg/core.py" in show.stdout and "SUBANSWER" in show.stdout

    assert rlmd("show", "last", home=rlmd_home).stdout == show.stdout

    exported = tmp_path / "run.jsonl"
    exp = rlmd("export", out["run_id"], "--format", "jsonl", "-o", str(exported), home=rlmd_home)
    assert exp.returncode == 0, exp.stderr
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert any("grep(r'class Engine')" in json.dumps(line) for line in lines)


def test_plain_output_prints_answer_and_trajectory_hint(rlmd_home, codebase, script):
    proc = rlmd(
        "run",
        "Where is Engine defined?",
        "--context",
        str(codebase),
        "--model",
        f"scripted:{script}",
        home=rlmd_home,
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == "pkg/core.py"
    assert "rlmd show" in proc.stderr


def test_context_from_stdin(rlmd_home, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["```repl\nFINAL(len(context))\n```"]))
    proc = rlmd(
        "run",
        "How long?",
        "--context",
        "-",
        "--model",
        f"scripted:{script}",
        "--json",
        home=rlmd_home,
        input="12345",
    )
    assert json.loads(proc.stdout)["answer"] == "5"


def test_missing_local_model_says_the_exact_command(rlmd_home):
    proc = rlmd("run", "q", "--context", "-", home=rlmd_home, input="x")
    assert proc.returncode == 2
    assert "rlmd models pull qwen2.5-coder-1.5b" in proc.stderr


def test_bad_inputs_give_clear_errors(rlmd_home, tmp_path):
    proc = rlmd("run", "q", "--context", str(tmp_path / "nope"), home=rlmd_home)
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr
    proc = rlmd("run", "q", "--context", "-", "--model", "nosuch-model", home=rlmd_home, input="x")
    assert proc.returncode == 2 and "nosuch-model" in proc.stderr
    proc = rlmd("show", "zzzz", home=rlmd_home)
    assert proc.returncode == 2 and "no run" in proc.stderr
    proc = rlmd(
        "run",
        "q",
        "--context",
        "-",
        "--max-iterations",
        "0",
        "--model",
        "scripted:x.json",
        home=rlmd_home,
        input="x",
    )
    assert proc.returncode == 2 and "--max-iterations must be >= 1" in proc.stderr


def test_a_value_that_starts_with_a_dash_says_to_use_equals(rlmd_home):
    """Review15 left: ``rlmd mcp --workspace -dash`` said only "argument --workspace/-w:
    expected one argument" (argparse reads ``-dash`` as an option); ``--workspace=-dash``
    works, and the error now says so."""
    for argv, option in [
        (["mcp", "--no-start", "--workspace", "-dash"], "--workspace"),
        (["mcp", "-w", "-dash"], "--workspace"),
        (["run", "q", "--context", "-dash"], "--context"),
        (["train", "rollout", "--tasks", "-dash"], "--tasks"),
    ]:
        proc = rlmd(*argv, home=rlmd_home)
        assert proc.returncode == 2, proc.stderr
        assert f"'-dash' reads as an option: write {option}=-dash" in proc.stderr, proc.stderr
    # a forgotten value stays a plain error: --model is not a value for --context
    proc = rlmd("run", "q", "--context", "--model", "x", home=rlmd_home)
    assert proc.returncode == 2 and "reads as an option" not in proc.stderr, proc.stderr
    # a positional value: "the following arguments are required: name" said no more
    proc = rlmd("models", "pull", "-x", home=rlmd_home)
    assert proc.returncode == 2
    assert "'-x' reads as an option: a value that starts with '-' goes after --" in proc.stderr
    assert "(rlmd models pull -- -x)" in proc.stderr


def test_budget_exhaustion_exit_code_and_marked_answer(rlmd_home, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {"match": "^Question: .*\\n\\nWork so far", "response": "partial answer"}
                ],
                "default": "```repl\nprint(len(context))\n```",
            }
        )
    )
    proc = rlmd(
        "run",
        "q",
        "--context",
        "-",
        "--model",
        f"scripted:{script}",
        "--max-iterations",
        "2",
        "--json",
        home=rlmd_home,
        input="abc",
    )
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["status"] == "max_iterations"
    assert (out["answer"], out["answer_source"]) == ("partial answer", "extraction")


def test_models_lists_builtin_local_models_and_usability(rlmd_home):
    proc = rlmd("models", home=rlmd_home)
    assert proc.returncode == 0
    assert "qwen2.5-coder-1.5b" in proc.stdout and "qwen2.5-coder-0.5b" in proc.stdout
    assert "rlmd models pull" in proc.stdout


def test_models_with_a_broken_config_says_which_file_and_key(rlmd_home, tmp_path):
    """A wrong provider in the user config made ``rlmd models`` print a traceback."""
    (rlmd_home / "config.toml").write_text('[models.x]\nprovider = "nosuch"\nmodel = "m"\n')
    proc = rlmd("models", home=rlmd_home)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "config.toml: [models.x].provider: 'nosuch' is not one of" in proc.stderr
    (rlmd_home / "config.toml").write_text("[run\n")  # not TOML
    proc = rlmd("models", home=rlmd_home)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "config.toml" in proc.stderr


def _alive(pid: int) -> bool:
    """Running (zombies awaiting a slow reaper count as gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "\nState:\tZ" not in fh.read()
    except FileNotFoundError:
        return False


def _busy_kernel(root: int) -> int | None:
    """The host pid of a kernel process below ``root`` that is burning CPU (the busy cell):
    the kernel runs in its own PID namespace, so it cannot report its host pid itself."""
    todo, seen = [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            todo += children(pid)  # forked by any thread (rlmd launches kernels from workers)
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{pid}/stat") as fh:
                cpu_ticks = sum(int(v) for v in fh.read().rpartition(")")[2].split()[11:13])
        except (OSError, ValueError):
            continue
        if b"kernel/main.py" in cmdline and cpu_ticks > 20 and b"setpriv" not in cmdline:
            return pid
    return None


def _start_busy_run(home, tmp_path):
    import time

    script = tmp_path / "busy.json"
    code = "while True:\n    pass"
    script.write_text(json.dumps([f"```repl\n{code}\n```"]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmd.cli",
            "run",
            "q",
            "--context",
            "-",
            "--model",
            f"scripted:{script}",
            "--cell-timeout",
            "600",
            "--json",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLMD_HOME": str(home)},
    )
    proc.stdin.write("ctx")
    proc.stdin.close()
    deadline = time.monotonic() + 60
    while (kernel := _busy_kernel(proc.pid)) is None:
        assert time.monotonic() < deadline, "the cell never started"
        time.sleep(0.1)
    return proc, kernel


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_cancels_the_run_and_stops_its_kernel(rlmd_home, tmp_path, signame):
    """SIGHUP too (review18: a closed terminal killed rlmd without its clean-up: the run was
    marked interrupted by the next rlmd, the kernel ran on until its cell ended)."""
    import signal
    import time

    proc, kernel = _start_busy_run(rlmd_home, tmp_path)
    proc.send_signal(getattr(signal, signame))
    assert proc.wait(timeout=30) == 143
    deadline = time.monotonic() + 10
    while _alive(kernel) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(kernel)
    runs = json.loads(rlmd("runs", "--json", home=rlmd_home).stdout)
    assert runs[0]["status"] == "cancelled"


def test_killed_host_does_not_leave_its_kernel_running(rlmd_home, tmp_path):
    """SIGKILL cannot be handled: the kernel notices its parent is gone and exits."""
    import signal
    import time

    proc, kernel = _start_busy_run(rlmd_home, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _alive(kernel) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(kernel)
    runs = json.loads(rlmd("runs", "--json", home=rlmd_home).stdout)
    assert runs[0]["status"] == "interrupted"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "  "], "the question is empty"),
        (["run", "q", "--cell-timeout", "0"], "--cell-timeout must be a number of seconds > 0"),
        (["run", "q", "--max-usd", "nan"], "--max-usd must be a number > 0"),
        (["run", "q", "--threads", "0"], "--threads must be >= 1"),
    ],
)
def test_nonsense_arguments_are_refused_before_anything_runs(rlmd_home, args, needle):
    proc = rlmd(*args, home=rlmd_home)
    assert proc.returncode == 2 and needle in proc.stderr


def test_run_budget_flags_are_the_engines_budget(rlmd_home, tmp_path):
    """Review18: ``rlmd run`` checked its budget flags with its own rules, apart from the
    engine's: ``--max-subcalls 0`` was refused where a project file's ``[run] max_subcalls =
    0`` and the daemon's ``budgets.max_subcalls: 0`` start a run without sub-calls. One check
    now: the run starts, and its sub-call ends it with that budget's status."""
    script = tmp_path / "sub.json"
    cells = ["```repl\nprint(llm_query('sub: where?'))\n```", "```repl\nFINAL('x')\n```"]
    script.write_text(json.dumps({"responses": cells}))
    proc = rlmd("run", "q", "--model", f"scripted:{script}", "--max-subcalls", "0", home=rlmd_home)
    assert "--max-subcalls" not in proc.stderr, proc.stderr
    runs = json.loads(rlmd("runs", "--json", home=rlmd_home).stdout)
    assert [r["status"] for r in runs] == ["max_subcalls"]


def test_store_and_file_errors_are_messages_not_tracebacks(rlmd_home, tmp_path, script, codebase):
    rlmd("run", "q", "--context", str(codebase), "--model", f"scripted:{script}", home=rlmd_home)
    proc = rlmd("runs", "--search", '"', home=rlmd_home)  # review17: it listed every run
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "the search holds no word to look for" in proc.stderr
    proc = rlmd("runs", "--status", "bogus", home=rlmd_home)  # review17: names the statuses
    assert proc.returncode == 2 and "--status 'bogus' is no run status" in proc.stderr
    proc = rlmd(
        "export", "last", "--output", str(tmp_path / "no" / "such" / "dir.json"), home=rlmd_home
    )
    assert proc.returncode == 2 and "cannot write" in proc.stderr and "Traceback" not in proc.stderr
    proc = rlmd("runs", home="/proc/nope")
    assert proc.returncode == 2 and "RLMD_HOME" in proc.stderr


def _store_command(command: str, tmp_path) -> list[str]:
    """The arguments of ``rlmd runs``, ``rlmd show last`` or a scripted ``rlmd run``: the
    commands that open the store."""
    args = {"runs": ["runs"], "show": ["show", "last"], "run": ["run", "q"]}[command]
    if command == "run":
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"responses": ["```repl\nFINAL('x')\n```"]}))
        args += ["--model", f"scripted:{script}"]
    return args


@pytest.mark.parametrize("command", ["runs", "show", "run"])
def test_corrupt_store_is_a_message_with_the_fix_not_a_traceback(rlmd_home, command, tmp_path):
    (rlmd_home / "rlmd.db").write_bytes(os.urandom(8192))  # random bytes, not SQLite
    proc = rlmd(*_store_command(command, tmp_path), home=rlmd_home)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "not a database" in proc.stderr and "Move it aside" in proc.stderr


@pytest.mark.parametrize("command", ["runs", "show", "run"])
def test_a_store_from_a_newer_rlmd_is_a_message_and_left_as_it_was(rlmd_home, command, tmp_path):
    """A store whose schema version is newer than this code knows (written by a newer rlmd,
    in WAL mode or not): the StoreVersionError's message, exit 1, the file untouched."""
    store = rlmd_home / "rlmd.db"
    conn = sqlite3.connect(store)
    conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY)")
    conn.execute("PRAGMA user_version = 99")
    if command != "run":
        conn.execute("PRAGMA journal_mode = wal")
    conn.close()
    before = store.read_bytes()
    proc = rlmd(*_store_command(command, tmp_path), home=rlmd_home)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "schema version 99" in proc.stderr and "upgrade rlmd" in proc.stderr
    assert store.read_bytes() == before


def test_doctor_prints_every_check_and_exits_with_the_verdict(tmp_path):
    home = tmp_path / "home"
    as_json = rlmd("doctor", "--no-sandboxes", "--json", home=home)
    text = rlmd("doctor", "--no-sandboxes", home=home)
    checks = json.loads(as_json.stdout)["checks"]
    assert {"python", "home", "store", "config", "default model"} <= {c["name"] for c in checks}
    for c in checks:
        assert f"{c['status']:>4}  {c['name']}: " in text.stdout
    failed = any(c["status"] == "fail" for c in checks)
    assert text.returncode == as_json.returncode == (1 if failed else 0)
    assert text.stdout.rstrip().endswith("some checks failed" if failed else "rlmd is ready")


SLOW_DISK_RUN = """
import sys, time
import rlmd.context as context

read = context._read_text

def slow_read(path, *args):
    print("reading", path, flush=True)
    time.sleep(1.0)  # a slow disk: this codebase takes minutes to read
    return read(path, *args)

context._read_text = slow_read
from rlmd.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_acts_while_the_codebase_is_still_loading(rlmd_home, tmp_path):
    """SIGTERM during the load of a slow codebase ends `rlmd run` long before the load
    could finish (600 files at 1 s each): the load runs off the event loop and stops."""
    import signal

    folder = tmp_path / "big"
    folder.mkdir()
    for i in range(600):
        (folder / f"m{i:03}.py").write_text(f"x = {i}\n")
    script = tmp_path / "never.json"
    script.write_text(json.dumps(["```repl\nFINAL('too late')\n```"]))
    tmp = tmp_path / "tmp"  # where the run's kernel gets its working folder
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_DISK_RUN, "run", "q", "--context", str(folder)]
        + ["--model", f"scripted:{script}", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RLMD_HOME": str(rlmd_home), "TMPDIR": str(tmp)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("reading ")  # the load is under way
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert "terminated before the run started" in stderr and "Traceback" not in stderr
    assert json.loads(rlmd("runs", "--json", home=rlmd_home).stdout) == []  # no model request
    # the kernel started while the codebase loaded was stopped and its folder removed
    assert [p.name for p in tmp.iterdir() if p.name.startswith("rlmd-sandbox-")] == []


PROVIDER_SDKS_AFTER = """
import sys
from rlmd.cli.main import main

try:
    main(["--help"])
except SystemExit:
    pass
helped = sorted(m for m in sys.modules if m.split(".")[0] in ("openai", "anthropic"))
code = main(sys.argv[1:])
ran = sorted(m for m in sys.modules if m.split(".")[0] in ("openai", "anthropic"))
print(code, helped, ran, file=sys.stderr)
sys.exit(0 if code == 0 and not helped and not ran else 1)
"""


def test_help_and_a_scripted_run_do_not_import_provider_sdks(rlmd_home, codebase, script):
    """openai costs ~1.4 s to import: only a run that calls an OpenAI model pays it."""
    proc = subprocess.run(
        [sys.executable, "-c", PROVIDER_SDKS_AFTER, "run", "Where is Engine defined?"]
        + ["--context", str(codebase), "--model", f"scripted:{script}", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "RLMD_HOME": str(rlmd_home)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1])["status"] == "completed"


def test_sandbox_commands_without_the_docker_sdk_say_what_to_install(rlmd_home, tmp_path):
    """`rlmd sandbox ls` printed a ModuleNotFoundError traceback when the container extra
    (the docker SDK) was not installed."""
    hide = tmp_path / "no-docker"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['docker'] = None\n")
    (tmp_path / "tpl" / "mine").mkdir(parents=True)
    (tmp_path / "tpl" / "mine" / "Dockerfile").write_text("FROM scratch\n")
    env = {
        **os.environ,
        "RLMD_HOME": str(rlmd_home),
        "COLUMNS": "200",
        "PYTHONPATH": os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")]),
    }

    def sandbox(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "rlmd.cli", "sandbox", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    probe = subprocess.run(
        [sys.executable, "-c", "import docker"], capture_output=True, text=True, env=env
    )
    assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr  # the SDK is hidden

    listed = sandbox("ls", "--dir", str(tmp_path / "tpl"))
    assert listed.returncode == 0, listed.stderr
    assert "mine" in listed.stdout  # the templates are still listed, none as built
    as_json = sandbox("ls", "--json", "--dir", str(tmp_path / "tpl"))
    assert [(t["name"], t["image_id"]) for t in json.loads(as_json.stdout)] == [("mine", None)]
    reaped = sandbox("reap")
    assert reaped.returncode == 1
    for proc in (listed, as_json, reaped):
        assert "Traceback" not in proc.stderr
        assert "pip install 'rlmd[container]'" in proc.stderr, proc.stderr


UNISOLATED = '[run]\nsandbox_options = { isolation = "none" }\n'
"""A user config whose subprocess sandbox gets what a machine with neither bwrap nor a
usable unshare gives it: no wrapper."""


def test_an_unisolated_sandbox_is_announced_on_every_run(rlmd_home, codebase, script):
    (rlmd_home / "config.toml").write_text(UNISOLATED)
    for _ in range(2):
        proc = rlmd(
            "run", "Where?", "--context", str(codebase), "--model", f"scripted:{script}",
            "--quiet", home=rlmd_home,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "warning:" in proc.stderr and "NOT isolated" in proc.stderr
        assert "apt-get install bubblewrap" in proc.stderr


def test_require_isolation_refuses_an_unisolated_run_before_any_code(rlmd_home, codebase, script):
    (rlmd_home / "config.toml").write_text(UNISOLATED + "[sandbox]\nrequire_isolation = true\n")
    proc = rlmd(
        "run", "Where?", "--context", str(codebase), "--model", f"scripted:{script}",
        "--json", home=rlmd_home,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Refusing to run" in proc.stderr and "apt-get install bubblewrap" in proc.stderr
    assert json.loads(rlmd("runs", "--json", home=rlmd_home).stdout) == []


def test_doctor_names_the_missing_isolation_and_the_command_that_fixes_it(rlmd_home):
    (rlmd_home / "config.toml").write_text(UNISOLATED)
    proc = rlmd("doctor", "--json", home=rlmd_home)
    check = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "sandbox subprocess")
    assert check["status"] == "warn"
    assert "neither bwrap nor unshare" in check["detail"]
    assert "apt-get install bubblewrap" in check["fix"]


ATTACK = (
    "\x1b[2J"  # clear the screen
    "\x1b]0;pwned\x07"  # retitle the window
    "\x1b]52;c;cHduZWQ=\x1b\\"  # OSC 52: write the clipboard
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"  # OSC 8: a hidden link
    "\x9b31m"  # C1 CSI
    "gpj.\u202eexe"  # a right-to-left override: reads as "exe.jpg" (Trojan Source)
)


@pytest.fixture
def attack_script(tmp_path):
    """A scripted run whose cell prints escape sequences (as any printed file could) and
    returns them as its answer. The code itself holds only their Python escapes."""
    path = tmp_path / "attack.json"
    cell = f"print({ATTACK!r})\nFINAL({ATTACK!r})"
    path.write_text(json.dumps({"responses": [f"```repl\n{cell}\n```"]}))
    return path


def test_terminal_escape_injection_is_shown_not_obeyed(rlmd_home, attack_script):
    proc = rlmd("run", "q", "--model", f"scripted:{attack_script}", home=rlmd_home)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stderr and "\x9b" not in proc.stderr
    assert "\\x1b]52;c;cHduZWQ=" in proc.stderr  # the progress shows what the cell printed
    assert proc.stdout == ATTACK + "\n"  # piped: the answer as is

    show = rlmd("show", "last", home=rlmd_home)
    assert show.returncode == 0, show.stderr
    assert "\x1b" not in show.stdout and "\x9b" not in show.stdout
    assert "\\x1b]0;pwned" in show.stdout
    assert "\u202e" not in show.stdout and "gpj.\\u202eexe" in show.stdout
    runs = rlmd("runs", home=rlmd_home)
    assert "\x1b" not in runs.stdout


def test_terminal_escape_injection_in_the_answer_on_a_terminal(rlmd_home, attack_script, tmp_path):
    import pty

    primary, secondary = pty.openpty()
    stderr = tmp_path / "stderr"
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlmd.cli", "run", "q", "--model", f"scripted:{attack_script}"],
            stdout=secondary,
            stderr=err,
            env={**os.environ, "RLMD_HOME": str(rlmd_home)},
        )
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    assert proc.wait(timeout=120) == 0, stderr.read_text()
    assert shown, stderr.read_text()
    assert b"\x1b" not in shown and "\x9b".encode() not in shown
    assert b"\\x1b]52;c;cHduZWQ=" in shown


def test_lone_surrogates_in_question_and_answer_are_stored_and_printed(rlmd_home, tmp_path):
    script = tmp_path / "script.json"
    cell = "print('out \\ud800')\nFINAL('\\ud800')"  # the answer is a lone surrogate
    script.write_text(json.dumps({"responses": [f"```repl\n{cell}\n```"]}))
    # Bytes that are not UTF-8 (\xed\xa0\x80) reach Python's argv as lone surrogates.
    question = "where \udced\udca0\udc80 is it"
    proc = rlmd("run", question, "--model", f"scripted:{script}", home=rlmd_home)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "could not record" not in proc.stderr
    assert proc.stdout == "\\ud800\n"

    (run,) = json.loads(rlmd("runs", "--json", home=rlmd_home).stdout)
    assert run["status"] == "completed"
    assert run["question"] == "where \\udced\\udca0\\udc80 is it"
    assert run["root_model"] and run["answer"] == "\\ud800"
    show = rlmd("show", "last", home=rlmd_home)
    assert show.returncode == 0 and "out \\ud800" in show.stdout
    proc = rlmd("run", question, "--model", f"scripted:{script}", "--json", home=rlmd_home)
    assert json.loads(proc.stdout)["answer"] == "\\ud800"  # as stored, valid Unicode


def test_samples_run_k_trajectories_and_print_the_vote(rlmd_home, tmp_path):
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            {
                "rules": [{"match": "\\[cell 1\\]", "response": "```repl\nFINAL(n)\n```"}],
                "default": "```repl\nn = len(context)\nprint(n)\n```",
            }
        )
    )
    args = ("run", "q", "--context", "-", "--model", f"scripted:{script}")
    proc = rlmd(*args, "--samples", "2", "--json", home=rlmd_home, input="abc")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"] == "3" and out["vote"]["tally"] == {"3": 2.0}
    assert len({s["run_id"] for s in out["vote"]["samples"]}) == 2
    bad = rlmd(*args, "--samples", "0", home=rlmd_home, input="abc")
    assert bad.returncode == 2 and "--samples must be from 1 to 32, not 0" in bad.stderr
    # review14: --samples 1000 started 1000 kernels at once (each sample has its own REPL)
    bad = rlmd(*args, "--samples", "1000", home=rlmd_home, input="abc")
    assert bad.returncode == 2 and "--samples must be from 1 to 32, not 1000" in bad.stderr


SPOOL_KEPT = """
import sys
from rlmd import context

kept = []
add = context.Spool.add

def counting_add(self, rel, data):
    kept.append(rel)
    return add(self, rel, data)

context.Spool.add = counting_add
from rlmd.cli.main import main
code = main(sys.argv[1:])
print(code, len(kept), file=sys.stderr)
"""


@pytest.mark.parametrize("samples", ["1", "2"])
def test_only_a_single_run_spools_the_codebase(rlmd_home, codebase, samples, tmp_path):
    """The spool serves one run's own REPL; with --samples K no REPL takes it, and it would
    keep every file's bytes besides their text until the read ended."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL(str(len(context)))\n```"}))
    proc = subprocess.run(
        [sys.executable, "-c", SPOOL_KEPT, "run", "q", "--context", str(codebase)]
        + ["--model", f"scripted:{script}", "--samples", samples, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "RLMD_HOME": str(rlmd_home)},
        timeout=120,
    )
    code, kept = proc.stderr.split()[-2:]
    assert code == "0", proc.stderr[-2000:]
    assert json.loads(proc.stdout)["answer"] == "5"
    assert (int(kept) > 0) == (samples == "1")


def test_sandbox_ls_shows_every_cell_whole_at_80_columns() -> None:
    """Review14: on 80 columns ``rlmd sandbox ls`` cut the image tag to ``rlmd/sandbox-b…``
    and the creation time to ``2026-12-02T23:…``."""
    from rich.console import Console

    from rlmd.cli.sandbox import templates_table
    from rlmd.sandbox.docker.images import TemplateInfo

    infos = [
        TemplateInfo("base", "rlmd/sandbox-base:latest", "/t/base", "6132bf735b02", 253_000_000,
                     "2026-12-02T23:38:07", stale=True),
        TemplateInfo("data", "rlmd/sandbox-data:latest", "/t/data"),
    ]  # fmt: skip
    for width in (200, 80, 40):
        console = Console(width=width, record=True, color_system=None)
        console.print(templates_table(infos, width))
        text = console.export_text()
        assert "…" not in text and all(len(line) <= width for line in text.splitlines())
        assert "2026-12-02 23:38" in text and "6132bf735b02" in text and "(stale)" in text
        assert "rlmd/sandbox-base:latest" in text and "rlmd/sandbox-data:latest" in text


def test_doctor_keeps_a_wrapped_fix_in_its_column() -> None:
    """Review14: at 80 columns a fix wrapped back to the left edge, splitting its command
    (``rlmd attach`` at the end of one line, ``--stdio`` at the start of the next)."""
    from rich.console import Console

    from rlmd.cli.doctor import checks_table
    from rlmd.server.doctor import Check

    checks = [
        Check("daemon", "warn", "not running (no socket at /a/long/home/run/rlmd.sock)",
              fix="start it with: rlmd serve  (editors start it via rlmd attach --stdio)"),
        Check("python", "ok", "3.11.7"),
    ]  # fmt: skip
    console = Console(width=60, record=True, color_system=None)
    console.print(checks_table(checks))
    lines = console.export_text().splitlines()
    assert lines[0].startswith("warn  daemon: not running")
    fix = next(n for n, line in enumerate(lines) if "fix:" in line)
    assert lines[fix].startswith("      fix: start it with")
    assert lines[fix + 1].startswith(" " * 11) and "rlmd attach --stdio" in lines[fix + 1]
    assert lines[-1].startswith("  ok  python: 3.11.7")


def test_a_codebase_folder_whose_name_is_not_utf8_is_asked_about(rlmd_home, tmp_path):
    """A new user's walk (review15): ``rlmd run --context`` on a folder named with a byte
    that is not UTF-8 (``bad\\xff``: legal on Linux) stopped with "'utf-8' codec can't
    encode character '\\udcff'" (the symbol index's disk cache keyed the folder by its
    UTF-8 text); a daemon workspace of that folder failed to start the same way."""
    folder = tmp_path / os.fsdecode(b"bad\xff")
    folder.mkdir()
    (folder / "a.py").write_text("def f():\n    return 1\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL('a.py')\n```"}))
    for sandbox in ("inprocess", "subprocess"):
        proc = rlmd(
            "run", "where is f?", "--context", str(folder), "--model", f"scripted:{script}",
            "--sandbox", sandbox, home=rlmd_home,
        )  # fmt: skip
        assert proc.returncode == 0 and proc.stdout == "a.py\n", proc.stderr
    assert list((rlmd_home / "cache" / "codeintel").glob("*.json"))


def test_a_workspace_key_is_the_folder_bytes_hash() -> None:
    from rlmd.workspace.checkpoint import checkpoint_path, workspace_key

    bad = os.fsdecode(b"/p/bad\xff")
    assert workspace_key(bad) != workspace_key("/p/bad") and checkpoint_path(bad).name
    # a UTF-8 name keeps the key it had (its checkpoint is still found)
    import hashlib

    assert workspace_key("/p/ünï") == hashlib.sha256("/p/ünï".encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["run", "q", "--context", "", "--model", "scripted:x.json"], "--context"),
        (["run", "q", "--context", "-", "--template", " "], "--template"),
        (["runs", "--status", ""], "--status"),
        (["runs", "--search", ""], "--search"),
        (["export", "last", "--output", ""], "--output"),
        (["serve", "--log-file", ""], "--log-file"),
        (["mcp", "--workspace", "", "--no-start"], "--workspace"),
        (["tui", "--no-daemon", "--store", ""], "--store"),
    ],
)
def test_an_empty_path_or_filter_is_refused(rlmd_home, argv, flag):
    """A new user's walk (review16): ``rlmd run q --context "$DIR"`` with ``DIR`` unset
    loaded the current folder as the codebase; ``--output ""`` wrote to stdout;
    ``--template ""`` was ignored; ``runs --status ""`` said "no runs recorded yet"."""
    proc = rlmd(*argv, home=rlmd_home, input="x")
    assert proc.returncode == 2, proc.stderr
    assert f"{flag} is empty (an unset shell variable?)" in proc.stderr, proc.stderr


def test_a_folder_with_no_text_file_is_named_in_a_warning(rlmd_home, tmp_path):
    """A new user's walk (review16): ``rlmd run --context`` a folder of binary files (or an
    empty one) ran the model on an empty codebase with nothing on the terminal but
    "0 files"; each model call read nothing."""
    folder = tmp_path / "blobs"
    folder.mkdir()
    (folder / "a.bin").write_bytes(bytes(range(256)) * 8)
    (folder / "b.py").write_bytes(b"\x00\x01\x02")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL('none')\n```"}))
    proc = rlmd("run", "q", "--context", str(folder), "--model", f"scripted:{script}",
                "--max-iterations", "1", home=rlmd_home)  # fmt: skip
    assert f"warning: no file of {folder} was loaded as text (2 binary)" in proc.stderr
    assert "the model sees an empty codebase" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = rlmd("run", "q", "--context", str(tmp_path / "empty"), "--model",
                f"scripted:{script}", "--max-iterations", "1", home=rlmd_home)  # fmt: skip
    assert "was loaded as text (it holds no file)" in proc.stderr, proc.stderr
    proc = rlmd("run", "q", "--context", str(tmp_path / "blobs"), "--model",
                f"scripted:{script}", "--max-iterations", "1", "--quiet", home=rlmd_home)  # fmt: skip
    assert "warning" not in proc.stderr


def test_files_left_out_of_a_codebase_are_counted_on_the_first_line(rlmd_home, tmp_path):
    """Review17: a Latin-1 file (``caf\\xe9``) is not UTF-8, so it is skipped as binary; a
    legacy codebase lost such files without a word (the line said only "1 files")."""
    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "ok.py").write_text("x = 1\n")
    (folder / "latin.py").write_bytes(b"s = 'caf\xe9'\n")
    (folder / ".gitignore").write_text("skip.py\n")
    (folder / "skip.py").write_text("y = 2\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"default": "```repl\nFINAL('none')\n```"}))
    proc = rlmd("run", "q", "--context", str(folder), "--model", f"scripted:{script}",
                "--max-iterations", "1", home=rlmd_home)  # fmt: skip
    assert "· 2 files (skipped: 1 binary or not UTF-8)\n" in proc.stderr, proc.stderr


def test_a_context_link_that_leads_nowhere_is_named_as_a_link(rlmd_home, tmp_path):
    """``--context`` a symbolic link to a missing target (or one that loops) said "no such
    file or folder" of a link that is there."""
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    for name, target in (("loop", "loop"), ("gone", str(tmp_path / "nowhere"))):
        proc = rlmd("run", "q", "--context", str(tmp_path / name), home=rlmd_home)
        assert proc.returncode == 2
        assert f"is a symbolic link to {target}, which does not exist" in proc.stderr


@pytest.mark.parametrize("command", [("runs",), ("train", "rollout")])
def test_every_flag_says_what_it_does_in_help(command):
    """Review17 left: ``rlmd runs --limit``/``--json`` and most ``rlmd train rollout`` flags
    (``--samples``, ``--min-subcalls``, ``--overrun-zero``...) had no ``--help`` text."""
    import argparse

    from rlmd.cli.main import _parser

    parser = _parser()
    for word in command:
        (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = subs.choices[word]
    bare = [a.option_strings for a in parser._actions if a.option_strings and not a.help]
    assert bare == []
