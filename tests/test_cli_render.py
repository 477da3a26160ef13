"""Tests for the rich renderables of rlmd.cli.render."""

from __future__ import annotations

from pathlib import Path

from helpers.store_events import Emitter, record_three_depths
from rich.console import Console

from rlmd.cli.render import (
    fmt_cost,
    fmt_duration,
    fmt_time,
    fmt_tokens,
    run_duration,
    run_summary,
    run_tree,
    runs_table,
    short_ids,
    short_time,
)
from rlmd.cli.term import visible_all
from rlmd.store import Store


def text_of(renderable) -> str:
    console = Console(record=True, width=160, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_formatters() -> None:
    assert (
        fmt_tokens(950) == "950"
        and fmt_tokens(12_345) == "12.3k"
        and fmt_tokens(4_100_000) == "4.1M"
    )
    assert fmt_cost(0) == "$0" and fmt_cost(1.5) == "$1.50" and fmt_cost(0.00042) == "$0.000420"
    assert (
        fmt_duration(None) == "-" and fmt_duration(3.21) == "3.2s" and fmt_duration(185) == "3m05s"
    )
    assert short_ids(["abcdef0001x", "abcdef0002y"]) == {
        "abcdef0001x": "abcdef0001",
        "abcdef0002y": "abcdef0002",
    }


def test_runs_table_tree_and_summary(tmp_path: Path) -> None:
    with Store(tmp_path / "rlmd.db") as store:
        ids = record_three_depths(store)
        Emitter(store.record).start("a [bold]markup[/bold] question")  # still running
        runs = store.list_runs()
        table = text_of(runs_table(runs))
        assert ids["root"][:8] in table and "completed" in table and "running" in table
        assert "How many zebras" in table and "root-m" in table
        assert "[bold]markup[/bold]" in table  # user text is not parsed as markup
        root_row = next(line for line in table.splitlines() if "zebras" in line)
        assert " 2 " in root_row and " 4 " in root_row  # depth reached 2, 4 iterations in the tree

        tree = text_of(run_tree(store.tree(ids["root"])))
        for expected in (
            "iteration 1",
            "iteration 2",
            "root call",
            "sub call",
            "100→20 tok",
            "print(llm_query('count the zebras'))",
            "the answer is three zebras",
            "NameError",
            "child run " + ids["child"],
            "child run " + ids["grand"],
            "answer: 42 from child",
            "compaction: summarised 4 messages",
        ):
            assert expected in tree, expected
        assert tree.index("child run " + ids["child"]) < tree.index("child run " + ids["grand"])

        summary = text_of(run_summary(store.get_run(ids["root"])))
        for expected in (
            "completed",
            "How many zebras",
            "answer",
            "42",
            "by model",
            "sub-m",
            "by depth",
            "wall time 12s",
        ):
            assert expected in summary, expected
        running = text_of(run_summary(runs[0]))
        assert "own calls so far" in running


def test_formatters_show_a_stored_value_that_is_not_a_number() -> None:
    assert fmt_tokens("many") == "?'many'" and fmt_cost("abc") == "?'abc'"
    assert fmt_duration("slow") == "?'slow'" and fmt_duration(float("inf")) == "?inf"
    assert fmt_time("x") == "?'x'" and fmt_time(1e15) == "?1000000000000000.0"
    assert fmt_tokens("\x1b[2J" * 3).startswith("?'\\x1b[2J")  # escaped, not drawn
    assert short_time(None) == "-" and short_time("x") == "?'x'"
    assert run_duration({"started_at": "x", "finished_at": 5.0}) is None


def test_show_and_runs_on_a_store_whose_numbers_were_edited(tmp_path: Path) -> None:
    """Session 11 left `rlmd show` crashing (ValueError traceback) on a hand-edited
    non-numeric ``latency_s``; text or out-of-range numbers in the other numeric columns
    crashed `rlmd show` and `rlmd runs` too. Each still draws the run, the bad value as
    ``?`` and the value."""
    import sqlite3

    from helpers.cli import rlmd

    with Store(tmp_path / "rlmd.db") as store:
        ids = record_three_depths(store)
    db = sqlite3.connect(tmp_path / "rlmd.db")
    with db:
        db.execute("UPDATE nodes SET latency_s = 'slow', input_tokens = 'many', cost_usd = 1e999")
        db.execute(
            "UPDATE runs SET started_at = 1e15, cost_usd = 'abc', input_tokens = 'x' WHERE id = ?",
            (ids["root"],),
        )
        db.execute("UPDATE runs SET started_at = 'x' WHERE id = ?", (ids["child"],))
    db.close()
    for run, bad in ((ids["root"], "?1000000000000000.0"), (ids["child"], "?'x'")):
        shown = rlmd("show", run, home=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert "Traceback" not in shown.stderr
        assert "?'slow'" in shown.stdout and "?'many'" in shown.stdout and "?inf" in shown.stdout
        assert f"started {bad}" in shown.stdout and "answer: 42" in shown.stdout
    listed = rlmd("runs", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "?1000000000000000.0" in listed.stdout and "zebras" in listed.stdout


def test_a_stored_value_that_is_bytes_is_shown_and_exported_as_text(tmp_path: Path) -> None:
    """Review17: a value SQLite holds as a BLOB (another tool wrote bytes, invalid UTF-8,
    into a text column) ended ``rlmd export`` in a traceback ("Object of type bytes is not
    JSON serializable") and ``rlmd runs``/``show`` drew its repr (``b'q\\xff'``). Bytes are
    read as UTF-8, an undecodable byte as its escape (``\\xff``), as a JSON column too."""
    import json
    import sqlite3

    from helpers.cli import rlmd

    with Store(tmp_path / "rlmd.db") as store:
        ids = record_three_depths(store)
    db = sqlite3.connect(tmp_path / "rlmd.db")
    with db:
        db.execute(
            "UPDATE runs SET question = ?, answer = ?, usage = ? WHERE id = ?",
            (b"zebras \xff?", b"ans\xfe", b'{"total": {"calls": 3}}', ids["root"]),
        )
        db.execute("UPDATE nodes SET stdout = ?, data = ?", (b"out \xff", b'{"x": 1}'))
    db.close()
    for fmt in ("json", "jsonl"):
        done = rlmd("export", ids["root"], "--format", fmt, home=tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "zebras \\\\xff?" in done.stdout and "out \\\\xff" in done.stdout
        if fmt == "json":
            run = json.loads(done.stdout)["run"]
            assert run["answer"] == "ans\\xfe" and run["usage"] == {"total": {"calls": 3}}
    shown = rlmd("show", ids["root"], home=tmp_path)
    assert shown.returncode == 0 and "zebras \\xff?" in shown.stdout, shown.stderr
    assert "b'" not in shown.stdout
    listed = rlmd("runs", home=tmp_path)
    assert listed.returncode == 0 and "zebras \\xff?" in listed.stdout, listed.stderr


def test_show_and_export_of_a_run_id_with_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    """argv's undecodable bytes arrive as lone surrogates; `rlmd show` printed the codec's
    message ("surrogates not allowed") instead of saying there is no such run."""
    from helpers.cli import rlmd

    with Store(tmp_path / "rlmd.db") as store:
        record_three_depths(store)
    for command in ("show", "export"):
        done = rlmd(command, "ab\udcff", home=tmp_path)
        assert done.returncode == 2
        assert "no run 'ab\\udcff' (see rlmd runs)" in done.stderr
        assert "codec" not in done.stderr


def test_a_huge_answer_is_shown_in_part_and_long_values_wrap_under_their_column() -> None:
    """Review14: a 50 MB ``FINAL`` (model code can write one) took ``rlmd show`` 23 s and
    1 GB to draw, all of it in the panel; and a long budget note wrapped back to the panel's
    edge, so its second line began ``budget (10) ended the run`` as if it were a label."""
    from rlmd.cli.render import MAX_SHOWN_ANSWER

    run = {
        "id": "r1",
        "status": "max_iterations",
        "question": "q",
        "answer": "ab" * 60_000 + "/a/very/long/path/" + "x" * 300,
        "answer_source": "extraction",
        "error": "no final answer after 10 iterations",
        "budget": {"max_iterations": 10},
        "iterations": 10,
    }
    console = Console(record=True, width=80, color_system=None)
    console.print(run_summary(run))
    text = console.export_text()
    assert f"{120_318 - MAX_SHOWN_ANSWER:,} more characters" in text
    assert "rlmd export r1 has the whole answer" in text
    assert len(text) < 2 * MAX_SHOWN_ANSWER and "…" in text
    assert "ab" * 30 in text  # folded onto lines of its own, not cut
    labels = [line[2:11].strip() for line in text.splitlines()[1:6]]
    assert labels == ["status", "question", "answer", "", ""], labels
    wrapped = [line for line in text.splitlines() if "budget" in line]
    assert len(wrapped) == 2 and "budget (10) ended the run" in wrapped[1], wrapped
    assert all(line[2:11].strip() in ("budget", "") for line in wrapped), wrapped
    short = text_of(run_summary({**run, "answer": "42"}))
    assert "answer   42  (extraction)" in short and "more characters" not in short


def _chain_of_child_runs(home: Path, depth: int) -> str:
    """A store whose root run has a chain of ``depth`` child runs, each the parent of the
    next (as ``rlmd run --max-depth`` that high with a model that always recurses makes)."""
    import sqlite3

    with Store(home / "rlmd.db") as store:
        root = record_three_depths(store)["root"]
    db = sqlite3.connect(home / "rlmd.db")
    with db:
        parent = root
        for i in range(depth):
            db.execute(
                "INSERT INTO runs (id, root_run_id, parent_run_id, depth, question, status,"
                " started_at) VALUES (?, ?, ?, ?, ?, 'completed', ?)",
                (f"chain{i:06d}", root, parent, i + 1, f"level {i + 1}", 1.7e9 + i),
            )
            parent = f"chain{i:06d}"
    db.close()
    return root


def test_a_run_tree_hundreds_deep_is_shown_or_said_to_be_too_deep(tmp_path: Path) -> None:
    """Review17: ``rlmd show`` of a run with 150 nested child runs (a real ``rlmd run
    --max-depth 150`` whose model always recursed) ended in a RecursionError traceback;
    now it is drawn, and a tree too deep to draw or to nest in JSON is one line that names
    the flat export instead."""
    from helpers.cli import rlmd

    assert visible_all(json_nest := _nested(3000))["a"] is not json_nest["a"]
    root = _chain_of_child_runs(tmp_path, 300)
    shown = rlmd("show", root, home=tmp_path)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-500:]
    assert "level 1\n" in shown.stdout and shown.stdout.count("↳ child run") >= 40  # then cut
    deep = tmp_path / "deep"
    deep.mkdir()
    root = _chain_of_child_runs(deep, 3000)
    for args in (("show", root), ("export", root)):
        done = rlmd(*args, home=deep)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-500:]
        assert f"rlmd export {root} --format jsonl writes it flat" in done.stderr
    flat = rlmd("export", root, "--format", "jsonl", home=deep)
    assert flat.returncode == 0 and flat.stdout.count('"type": "run"') == 3003


def _nested(depth: int) -> dict:
    top: dict = {}
    inner = top
    for _ in range(depth):
        inner["a"] = [{}]
        inner = inner["a"][0]
    return top


def test_a_columns_value_out_of_range_is_clamped(tmp_path: Path) -> None:
    """Review18: rich takes any digits in ``$COLUMNS``: ``COLUMNS=0 rlmd runs`` (and
    ``show``) printed nothing and exited 0, ``COLUMNS=99999999 rlmd show`` padded lines for
    minutes. Both draw at a width within ``TERMINAL_WIDTHS`` now (0: 80 wide)."""
    import os
    import subprocess
    import sys

    from rlmd.cli.term import TERMINAL_WIDTHS

    with Store(tmp_path / "rlmd.db") as store:
        root = record_three_depths(store)["root"]
    for columns in ("0", "99999999"):
        env = {**os.environ, "RLMD_HOME": str(tmp_path), "COLUMNS": columns}
        for args in (("runs",), ("show", root)):
            done = subprocess.run(
                [sys.executable, "-m", "rlmd", *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0 and "zebras" in done.stdout, (columns, args, done.stderr)
            widest = max(len(line) for line in done.stdout.splitlines())
            assert widest <= TERMINAL_WIDTHS[1], (columns, args, widest)
