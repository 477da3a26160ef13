"""What the CLI says about a run's end, as a new user meets it: answers printed literally,
FINALs the engine refused marked as such, partial answers labelled with the budget that ended
the run and its overshoot, readable tables at 80 columns, prefix and substring search, bad
usage refused with exit code 2."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import rlmd

ANSWER = "use string[idx] and [/b] then [red]x[/red]"


def script(tmp_path: Path, data: object, name: str = "s.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return f"scripted:{path}"


def at_80(*args: str, home: Path, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmd.cli", *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=120,
        env={**os.environ, "RLMD_HOME": str(home), "COLUMNS": "80"},
    )


def test_markup_in_an_answer_is_printed_literally_everywhere(rlmd_home, tmp_path):
    model = script(tmp_path, [f"```repl\nprint(context)\nFINAL({ANSWER!r})\n```"])
    proc = rlmd("run", "q", "--context", "-", "--model", model, home=rlmd_home, input="abc")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ANSWER + "\n"
    assert f"FINAL proposed {ANSWER}" in proc.stderr
    assert "completed (FINAL accepted)" in proc.stderr
    show = rlmd("show", "last", home=rlmd_home)
    assert show.returncode == 0
    for shown in (f"answer   {ANSWER}", f"FINAL: {ANSWER}", f"answer: {ANSWER}"):
        assert shown in show.stdout
    assert "not accepted" not in show.stdout


def test_a_refused_final_is_marked_in_progress_and_show(rlmd_home, tmp_path):
    # The first FINAL comes before any look at the context: the engine refuses it.
    model = script(
        tmp_path,
        [
            "```repl\nFINAL('a guess')\n```",
            "```repl\nprint(context)\nFINAL('abc')\n```",
        ],
    )
    proc = rlmd("run", "q", "--context", "-", "--model", model, home=rlmd_home, input="abc")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "abc\n"
    err = proc.stderr
    assert err.index("FINAL proposed a guess") < err.index("FINAL not accepted")
    assert err.index("FINAL not accepted") < err.index("FINAL proposed abc")
    show = rlmd("show", "last", home=rlmd_home).stdout
    assert "FINAL not accepted (the engine asked for more work): a guess" in show
    assert "FINAL: abc" in show and "FINAL: a guess" not in show


def test_an_extracted_answer_says_which_budget_ended_the_run_and_the_overshoot(rlmd_home, tmp_path):
    # A priced scripted model: $10 per million tokens, about $0.007 per call.
    (rlmd_home / "config.toml").write_text(
        "[models.priced]\n"
        'provider = "scripted"\n'
        f'model = "{tmp_path / "s.json"}"\n'
        "price_input = 10.0\nprice_output = 10.0\n"
    )
    script(
        tmp_path,
        {
            "rules": [{"match": "^Question: .*\\n\\nWork so far", "response": "half [b]done"}],
            "default": "```repl\nprint(len(context))\n```",
        },
    )
    args = ("run", "q", "--context", "-", "--model", "priced", "--max-usd", "0.01")
    proc = rlmd(*args, home=rlmd_home, input="abc")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "half [b]done\n"
    assert (
        "Partial answer: extracted from the work so far after the spend budget ($0.0100) "
        "ended the run; $" in proc.stderr
    )
    spent = json.loads(rlmd("runs", "--json", home=rlmd_home).stdout)[0]["tree"]["cost_usd"]
    assert spent > 0.01  # the call that crossed the limit and the extraction are paid for
    over = spent - 0.01
    assert f"${spent:.4f} spent, ${over:.4f} ({over / 0.01:.0%}) over." in proc.stderr
    show = rlmd("show", "last", home=rlmd_home).stdout
    assert "partial answer: extracted from the work so far after the spend budget" in show
    assert "partial answer (extracted): half [b]done" in show


def test_runs_and_models_are_readable_at_80_columns(rlmd_home, tmp_path):
    model = script(tmp_path, ["```repl\nprint(context)\nFINAL(context)\n```"])
    question = "Why does StreamReader block on an empty pipe?"
    assert rlmd("run", question, "-c", "-", "-m", model, home=rlmd_home, input="x").returncode == 0
    runs = at_80("runs", home=rlmd_home)
    assert runs.returncode == 0
    assert all(len(line) <= 80 for line in runs.stdout.splitlines())
    assert "Why does StreamReader" in runs.stdout and "completed" in runs.stdout
    assert "$0" in runs.stdout  # the cost column is not squeezed out
    models = at_80("models", home=rlmd_home)
    assert models.returncode == 0
    for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert name in models.stdout
        # the pull command is on one line, whole (it may wrap only at the terminal's edge)
        assert f"rlmd models pull {name}" in models.stdout.replace("\n", "")


def test_runs_search_finds_prefixes_and_substrings(rlmd_home, tmp_path):
    model = script(tmp_path, ["```repl\nprint(context)\nFINAL(context)\n```"])
    rlmd("run", "why does StreamReader block", "-c", "-", "-m", model, home=rlmd_home, input="x")
    rlmd("run", "something else", "-c", "-", "-m", model, home=rlmd_home, input="x")
    for query in ("Stream", "stream", "Reader", "treamRea", "does Stream"):
        found = json.loads(rlmd("runs", "--search", query, "--json", home=rlmd_home).stdout)
        assert [r["question"] for r in found] == ["why does StreamReader block"], query
    none = rlmd("runs", "--search", "Streamz", home=rlmd_home)
    assert none.returncode == 0 and "no runs match" in none.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("runs", "--limit", "0"), "--limit must be from 1 to"),
        (("serve", "--stdio", "--idle-timeout", "-1"), "--idle-timeout must be a number >= 0"),
        # review14: a misspelt level ran at INFO; an empty --model ("$MODEL" unset) ran the
        # default model instead
        (("serve", "--stdio", "--log-level", "verbose"), "invalid choice: 'VERBOSE'"),
        (("run", "q", "-c", "-", "-m", ""), "--model is empty; name a model"),
        (("run", "q", "-c", "-", "--sub-model", " "), "--sub-model is empty"),
        (("runs", "--limit", str(2**63)), "--limit must be from 1 to 1,000,000,000"),
        (("attach", "--stdio", "--timeout", "-1"), "--timeout must be a number of seconds > 0"),
        (("attach", "--stdio", "--timeout", "nan"), "--timeout must be a number of seconds > 0"),
        (("run", "q", "-c", "-", "--template", "nosuch"), "no sandbox template 'nosuch'"),
        # a KeyError's message, not its repr in quotes
        (("run", "q", "-c", "-", "-m", "nosuch"), "error: unknown model 'nosuch'; known:"),
        # review17: a misspelt status said "no runs match"
        (("runs", "--status", "complete"), "--status 'complete' is no run status; one of: runn"),
        # review17: without a docker engine these said "no docker engine" (exit 1)
        (("sandbox", "build", "nosuch"), "no sandbox template 'nosuch'"),
        (("sandbox", "build", "../x"), "invalid sandbox template name '../x'"),
        # review17: 500 words made one SQL expression too deep: "the store cannot be used.
        # Move it aside" (of a sound store)
        (("runs", "--search", " ".join(f"w{i}" for i in range(500))), "the search has 500 words"),
    ],
)
def test_bad_usage_exits_2_and_records_nothing(rlmd_home, args, needle):
    proc = rlmd(*args, home=rlmd_home, input="x")
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert rlmd("runs", "--json", home=rlmd_home).stdout.strip() in ("", "[]")


def test_e2b_without_its_key_is_bad_usage(rlmd_home):
    env_key = os.environ.pop("E2B_API_KEY", None)
    try:
        proc = rlmd("run", "q", "-c", "-", "--sandbox", "e2b", home=rlmd_home, input="x")
    finally:
        if env_key is not None:
            os.environ["E2B_API_KEY"] = env_key
    assert proc.returncode == 2 and "E2B_API_KEY" in proc.stderr


def test_a_nan_budget_is_refused():
    from rlmd.compat import RLM
    from rlmd.engine.budget import Budget

    with pytest.raises(ValueError, match="max_usd must be a number > 0, got nan"):
        Budget(max_usd=math.nan)
    with pytest.raises(ValueError, match="max_budget must be a number > 0, got nan"):
        RLM(backend="scripted", backend_kwargs={"model_name": "x.json"}, max_budget=math.nan)


@pytest.mark.parametrize(
    ("limits", "field", "reason"),
    [
        ({"max_usd": -1}, "max_usd", "must be a number > 0, got -1"),
        ({"max_seconds": math.inf}, "max_seconds", "must be a number of seconds > 0, got inf"),
        ({"cell_timeout_s": 0}, "cell_timeout_s", "must be a number of seconds > 0, got 0"),
        ({"max_iterations": 0}, "max_iterations", "must be >= 1, got 0"),
        ({"max_subcalls": -1}, "max_subcalls", "must be >= 0, got -1"),
        ({"max_tokens": 2.5}, "max_tokens", "must be a whole number, got 2.5"),
        ({"max_depth": "2"}, "max_depth", "must be a number, got '2'"),
    ],
)
def test_a_budget_error_names_its_field_as_data(limits, field, reason):
    """Review17 left: the CLI and the compat class each mapped Budget's field to their own
    name, the compat class by rewriting the message's text. The error now carries the field
    and the reason, and ``str()`` is the engine's message as before."""
    from rlmd.engine import BudgetError
    from rlmd.engine.budget import Budget

    with pytest.raises(BudgetError) as err:
        Budget(**limits)
    assert (err.value.field, err.value.reason) == (field, reason)
    assert str(err.value) == f"budget {field} {reason}" and isinstance(err.value, ValueError)


@pytest.mark.parametrize("args", [("runs", "--json"), ("train", "summary", "--json")])
def test_a_reader_that_goes_away_stops_the_command_quietly(rlmd_home, args):
    """Review14: ``rlmd runs --json | head -c 10`` ended in a BrokenPipeError traceback, and
    ``rlmd train summary --json | head`` printed "error: [Errno 32] Broken pipe"."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "rlmd", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "RLMD_HOME": str(rlmd_home)},
    )
    proc.stdout.close()  # before the command writes: its first write meets a closed pipe
    stderr = proc.stderr.read().decode()
    assert proc.wait(60) == 1, stderr
    assert "Traceback" not in stderr and "Broken pipe" not in stderr, stderr


def test_stdin_past_the_context_limit_is_refused_not_read_to_the_end(monkeypatch):
    """Review14: ``--context -`` read stdin whole, however much came: ``cat /dev/zero | rlmd
    run ...`` grew rlmd until the machine ran out of memory, while a file over the 2 GiB
    context limit is refused. Bytes that are not UTF-8 are replaced, as in a file."""
    import importlib
    import io

    import rlmd.context

    cli = importlib.import_module("rlmd.cli.main")  # rlmd.cli's "main" is the function

    class Endless(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, b):
            b[:] = b"\0" * len(b)
            return len(b)

    monkeypatch.setattr(rlmd.context, "MAX_CONTEXT_FILE_BYTES", 3 * 2**20)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(Endless())))
    with pytest.raises(ValueError, match=r"stdin holds more than 3,145,728 bytes"):
        cli._read_context("-")
    data = b"caf\xc3\xa9 \xff" + b"x" * (3 * 2**20 - 7)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    text = cli._read_context("-")
    assert text.startswith("café \ufffdx") and len(text) == 3 * 2**20 - 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_disk_is_one_line_not_a_traceback(rlmd_home, tmp_path):
    """Review17: ``rlmd export last > big.json`` on a full disk (here ``/dev/full``) ended
    in an OSError traceback from the write; ``show``, ``runs`` and ``run`` likewise."""

    model = script(tmp_path, ["```repl\nFINAL(context)\n```"])
    assert rlmd("run", "q", "-c", "-", "-m", model, home=rlmd_home, input="x").returncode == 0
    env = {**os.environ, "RLMD_HOME": str(rlmd_home)}
    for args in (["export", "last"], ["show", "last"], ["runs", "--json"]):
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [sys.executable, "-m", "rlmd", *args],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                timeout=120,
            )
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip() == "error: cannot write the output: No space left on device"


def test_a_closed_stdout_is_one_line_not_a_traceback_nor_a_silent_success(rlmd_home, tmp_path):
    """``rlmd run Q >&-``: Python's ``sys.stdout`` is ``None``, so writing the answer was an
    AttributeError traceback, and ``--json``'s ``print`` wrote nothing and exited 0."""
    model = script(tmp_path, ["```repl\nFINAL(context)\n```"])
    env = {**os.environ, "RLMD_HOME": str(rlmd_home)}
    for extra in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "rlmd", "run", "q", "-c", "-", "-m", model, "-q", *extra],
            input="x",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
            preexec_fn=lambda: os.close(1),  # noqa: PLW1509 - the child's stdout, closed
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "error: cannot write the output: stdout is closed" in done.stderr
