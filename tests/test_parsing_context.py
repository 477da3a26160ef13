"""Reply parsing, output capping, budgets and context loading: small deterministic units."""

from __future__ import annotations

import json

import pytest

from rlmd.context import load_codebase, load_context, summarise_tree
from rlmd.engine.budget import Budget, BudgetExhausted, Ledger
from rlmd.engine.parsing import (
    answer_in_outputs,
    cap_output,
    cell_inspects,
    close_open_fence,
    cut_after_first_block,
    final_is_literal,
    final_undefined_name,
    find_code_blocks,
    find_prose_final,
    is_empty_answer,
    is_short_answer,
)
from rlmd.engine.usage import Usage


def test_code_blocks_repl_and_python_fences_in_order_others_ignored():
    text = "a\n```repl\nx = 1\n```\nb\n```python\ny = 2\n```\n```bash\nls\n```\n```\nplain\n```\n```py\nz=3\n```"
    assert find_code_blocks(text) == ["x = 1\n", "y = 2\n", "z=3\n"]


def test_unterminated_last_fence_still_runs_and_empty_blocks_dropped():
    assert find_code_blocks("```repl\n\n```\n```repl\nprint(1)\nprint(") == ["print(1)\nprint(\n"]


def test_prose_final_forms():
    assert find_prose_final("so\nFINAL(42)") == ("final", "42")
    assert find_prose_final("FINAL('quoted answer')") == ("final", "quoted answer")
    assert find_prose_final("FINAL_VAR(result)") == ("final_var", "result")
    assert find_prose_final('FINAL_VAR("result")') == ("final_var", "result")
    assert find_prose_final("I will call FINAL later") is None


def test_cell_inspects():
    assert not cell_inspects('FINAL("guess")')
    assert not cell_inspects("FINAL_VAR('x')")
    assert cell_inspects("FINAL(len(context))")
    assert cell_inspects("x = 1\nFINAL(x)")
    assert cell_inspects("FINAL(grep('a'))")
    assert cell_inspects("this is ( not python")


def test_cut_after_first_block_and_close_open_fence():
    reply = "Look:\n```python\nprint(1)\n```\nOutput: 1\n```repl\nFINAL(1)\n```"
    assert cut_after_first_block(reply) == "Look:\n```python\nprint(1)\n```"
    # a non-code fence before the first code block is kept, and so is text without code
    assert cut_after_first_block("```\nout\n```\n```repl\nx\n```\nmore") == (
        "```\nout\n```\n```repl\nx\n```"
    )
    assert cut_after_first_block("FINAL(3)") == "FINAL(3)"
    assert cut_after_first_block("```repl\nprint(") == "```repl\nprint("  # still open
    assert close_open_fence("```repl\nprint(1)\n") == "```repl\nprint(1)\n```"
    assert close_open_fence("```repl\nprint(1)\n```") == "```repl\nprint(1)\n```"
    assert close_open_fence("no fence") == "no fence"


def test_final_is_literal_and_undefined_names():
    assert final_is_literal('FINAL("3")') and final_is_literal("x = 1\nFINAL(-3)")
    assert final_is_literal('FINAL(["a", "b"])')
    assert not final_is_literal("FINAL(x)")
    assert not final_is_literal("FINAL(len(context))")
    assert not final_is_literal('FINAL_VAR("x")')
    assert not final_is_literal("print(1)")  # no FINAL at all
    assert not final_is_literal("FINAL(")  # does not parse
    err = "Traceback (most recent call last):\nNameError: name 'answer' is not defined"
    assert final_undefined_name("FINAL(answer)", err) == "answer"
    assert final_undefined_name("FINAL(answer.strip())", err) == "answer"
    assert final_undefined_name("print(answer)\nFINAL(1)", err) is None  # not in FINAL
    assert final_undefined_name("FINAL(answer)", "ZeroDivisionError: x") is None


def test_answer_in_outputs_matches_whole_tokens_only():
    assert answer_in_outputs("7381344", ["the number is 7381344."])
    assert answer_in_outputs("'7381344'", ["7381344"])  # quotes are not part of it
    assert not answer_in_outputs("3", ["in the 1930s, 13 of them"])
    assert answer_in_outputs("streams.py", ["asyncio/streams.py:12:class StreamReader"])
    assert answer_in_outputs("Person", ["label counts: {'person': 4}"])  # case-insensitive
    assert not answer_in_outputs("", ["anything"])
    assert is_empty_answer(" [] ") and is_empty_answer("None") and not is_empty_answer("0")
    assert is_short_answer("42") and is_short_answer("pkg/mod.py") and is_short_answer("'x'")
    assert (
        not is_short_answer("two words")
        and not is_short_answer("")
        and not is_short_answer("x" * 101)
    )


def test_ledger_keeps_a_reserve_for_the_extraction():
    led = Ledger(Budget(max_seconds=100), reserve_s=20)
    assert 79 < led.remaining_seconds() <= 80
    assert 99 < led.remaining_seconds(include_reserve=True) <= 100
    led.started -= 85  # 85 s in: the loop's share is spent, the reserve is not
    with pytest.raises(BudgetExhausted) as exc:
        led.check()
    assert exc.value.status == "max_time" and "20 s kept" in str(exc.value)
    assert led.remaining_seconds() == 0 and 14 < led.remaining_seconds(include_reserve=True) <= 15


def test_cap_output_keeps_head_and_tail_and_says_so():
    text = "H" * 500 + "M" * 10_000 + "T" * 500
    capped = cap_output(text, 1000)
    assert capped.startswith("H" * 500) and capped.endswith("T" * 400)
    assert "10,000 characters cut" in capped and "1,000 characters per cell" in capped
    assert cap_output("short", 1000) == "short"


def test_ledger_checks_each_limit():
    led = Ledger(Budget(max_tokens=100, max_usd=1.0, max_subcalls=1))
    led.check()
    led.spend(100, 0.0)
    with pytest.raises(BudgetExhausted) as info:
        led.check()
    assert info.value.status == "max_tokens"
    # the first exhausted limit sticks for the whole tree
    led.tokens = 0
    with pytest.raises(BudgetExhausted):
        led.check()
    led2 = Ledger(Budget(max_subcalls=1))
    led2.check(subcall=True)
    led2.subcalls = 1
    led2.check()  # not a sub-call: fine
    with pytest.raises(BudgetExhausted, match="sub-call budget"):
        led2.check(subcall=True)


def test_budget_rejects_nonsense():
    with pytest.raises(ValueError):
        Budget(max_iterations=0)
    with pytest.raises(ValueError):
        Budget(max_tokens=-1)


def test_usage_rolls_up_to_ancestors():
    root = Usage()
    child = Usage(parent=root)
    root.record("big", 0, 100, 10, 0.01)
    child.record("small", 1, 50, 5, 0.001)
    d = root.to_dict()
    assert d["total"]["calls"] == 2 and d["total"]["total_tokens"] == 165
    assert set(d["by_model"]) == {"big", "small"} and set(d["by_depth"]) == {"0", "1"}
    assert child.to_dict()["total"]["calls"] == 1


def test_codebase_loader_honours_gitignore_binary_oversized(codebase):
    (codebase / "pkg" / "big.txt").write_text("x" * 2_000_000)
    (codebase / "pkg" / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (codebase / "sub").mkdir()
    (codebase / "sub" / ".gitignore").write_text("secret.py\n")
    (codebase / "sub" / "secret.py").write_text("x")
    (codebase / "sub" / "ok.py").write_text("y")
    (codebase / ".git").mkdir()
    (codebase / ".git" / "config").write_text("z")
    ctx = load_codebase(codebase)
    assert list(ctx.value) == [
        ".gitignore",
        "README.md",
        "pkg/__init__.py",
        "pkg/core.py",
        "pkg/util.py",
        "sub/.gitignore",
        "sub/ok.py",
    ]
    assert ctx.skipped["binary"] == 2 and ctx.skipped["oversized"] == 1
    assert ctx.skipped["ignored"] == 4  # build/, debug.log, sub/secret.py, .git/
    meta = ctx.metadata(lambda s: len(s) // 4)
    assert meta["files"] == 7 and meta["kind"] == "codebase"
    assert any(line.startswith("pkg/ (3 files)") for line in meta["tree"])


def test_a_gitignore_over_the_file_limit_is_not_read_whole(codebase):
    """Review19: a ``.gitignore`` was read whole, whatever its size: 100 MB of blank lines
    (a few hundred KB in git) took 17 s and 0.9 GB, so a cloned repository's 3 GB one would
    exhaust the daemon's memory. Over ``max_file_bytes`` it is read no further, not applied
    (as git skips one over 100 MiB) and counted as an oversized file; a small one still
    applies beside it."""
    (codebase / "sub").mkdir()
    (codebase / "sub" / "secret.py").write_text("x = 1\n")
    (codebase / "sub" / "gone.py").write_text("y = 2\n")
    (codebase / "sub" / ".gitignore").write_text("gone.py\n" + "secret.py\n" * 300)
    ctx = load_codebase(codebase, max_file_bytes=1_000)
    assert "sub/secret.py" in ctx.value and "sub/gone.py" in ctx.value  # not applied
    assert "sub/.gitignore" not in ctx.value and ctx.skipped["oversized"] == 1
    assert ctx.skipped["ignored"] == 2  # the top .gitignore still applies: build/, debug.log


def test_load_context_from_values_and_files(tmp_path):
    assert load_context("abc").kind == "text"
    assert load_context([1, 2]).kind == "list"
    assert load_context({"a": "b"}).kind == "dict"
    f = tmp_path / "d.jsonl"
    f.write_text('{"a": 1}\n\n{"b": 2}\n')
    assert load_context(f).value == [{"a": 1}, {"b": 2}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        load_context(bad)
    j = tmp_path / "d.json"
    j.write_text(json.dumps({"k": "v"}))
    assert load_context(j).kind == "dict"
    with pytest.raises(FileNotFoundError):
        load_context(tmp_path / "missing.txt")
    with pytest.raises(TypeError):
        load_context(3.5)


def test_tree_summary_is_bounded():
    paths = [f"d{i}/f{j}.py" for i in range(50) for j in range(2)]
    lines = summarise_tree(paths, max_lines=10)
    assert len(lines) == 10 and lines[-1].startswith("... ")


def test_special_files_are_skipped_or_refused(tmp_path):
    import os

    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    os.mkfifo(root / "pipe.txt")
    ctx = load_codebase(root)  # must not block on the FIFO
    assert list(ctx.value) == ["a.py"] and ctx.skipped["special"] == 1
    with pytest.raises(ValueError, match="not a regular file"):
        load_context(root / "pipe.txt")


def _mixed_corpus() -> dict[str, str]:
    """~14 M characters in 1,200 files of four kinds with very different token densities:
    stdlib code, English-like prose, digit tables, whitespace-and-symbol runs."""
    import random
    import sysconfig
    from pathlib import Path

    lib = Path(sysconfig.get_paths()["stdlib"])
    code = [
        (lib / rel).read_text(encoding="utf-8")
        for rel in ("json/decoder.py", "asyncio/streams.py", "argparse.py", "textwrap.py")
    ]
    rng = random.Random(7)
    words = "the of a to and which model answer river quietly bright measured".split()
    files = {}
    for i in range(1200):
        kind = i % 4
        if kind == 0:
            text = code[i % len(code)]
        elif kind == 1:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(200, 2000))) + ".\n"
        elif kind == 2:
            text = "\n".join(
                ",".join(str(rng.randint(0, 10**6)) for _ in range(8)) for _ in range(300)
            )
        else:
            text = ("    " * rng.randint(1, 8) + "=" * rng.randint(1, 80) + "\n") * 200
        files[f"f{i:04}"] = text
    return files


def test_sampled_token_count_of_a_big_context_is_within_2_percent_of_the_full_count():
    from rlmd.context import TOKENS_FULL_COUNT_CHARS, context_tokens
    from rlmd.models.tokens import estimate_tokens

    corpus = _mixed_corpus()
    assert sum(map(len, corpus.values())) > 2 * TOKENS_FULL_COUNT_CHARS  # so it samples
    counted: list[int] = []

    def counting(text: str) -> int:
        counted.append(len(text))
        return estimate_tokens(text)

    full = sum(estimate_tokens(v) for v in corpus.values())
    sampled = context_tokens(corpus, counting)
    assert sampled == pytest.approx(full, rel=0.02)
    assert sum(counted) <= 1024 * 1024  # the cost is bounded: only the slices were counted
    # below the threshold every string is counted
    small = dict(list(corpus.items())[:8])
    assert context_tokens(small, estimate_tokens) == sum(map(estimate_tokens, small.values()))


async def test_cancelled_codebase_load_stops_its_worker_thread(tmp_path, monkeypatch):
    """Cancelling ``load_context_async`` stops the walk in its thread at the next file."""
    import asyncio
    import threading

    import rlmd.context as context_mod

    for i in range(50):
        (tmp_path / f"m{i:02}.py").write_text("x = 1\n")
    reading, release, files_read = threading.Event(), threading.Event(), []
    thread_done = threading.Event()
    read, walk = context_mod._read_text, context_mod.load_codebase

    def held_read(path, *rest):
        files_read.append(path)
        reading.set()
        release.wait()  # hold the thread inside the first file until the test says so
        return read(path, *rest)

    def watched_walk(*args, **kwargs):
        try:
            return walk(*args, **kwargs)
        finally:
            thread_done.set()

    monkeypatch.setattr(context_mod, "_read_text", held_read)
    monkeypatch.setattr(context_mod, "load_codebase", watched_walk)
    task = asyncio.ensure_future(context_mod.load_context_async(tmp_path))
    await asyncio.to_thread(reading.wait)  # the loop stays free while the thread reads
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.to_thread(thread_done.wait)
    assert len(files_read) == 1  # stopped after the file in hand, not after all 50


def test_virtualenvs_under_any_name_and_node_modules_are_skipped(tmp_path):
    (tmp_path / "app.py").write_text("x = 1\n")
    for venv in ("venv", "env", "tools/py311"):
        (tmp_path / venv / "lib").mkdir(parents=True)
        (tmp_path / venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (tmp_path / venv / "lib" / "site.py").write_text("y = 2\n")
    (tmp_path / "node_modules" / "left-pad").mkdir(parents=True)
    (tmp_path / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    (tmp_path / "environment").mkdir()  # no pyvenv.cfg: an ordinary folder
    (tmp_path / "environment" / "setup.py").write_text("z = 3\n")
    ctx = load_codebase(tmp_path)
    assert sorted(ctx.value) == ["app.py", "environment/setup.py"]
    assert ctx.skipped["ignored"] == 4
    assert ctx.metadata(len)["skipped"] == {"ignored": 4}  # the model is told


def test_joined_ignore_rules_match_exactly_what_pathspec_matches():
    """``ignore_matcher`` joins a .gitignore's patterns into one expression when none is
    negated; it must ignore exactly the paths pathspec's own matching ignores (and hand
    rules with a negation to pathspec)."""
    import pathspec

    from rlmd.context import ALWAYS_IGNORED, ignore_matcher

    rule_sets = [
        list(ALWAYS_IGNORED),
        ["build/", "*.log", "/top.txt", "docs/**/*.tmp", "a?c", "[Tt]emp*", "**/cache", "x/**"],
        ["*.py", "!keep.py", "sub/"],  # a negation: pathspec decides
        ["# only a comment", ""],
        ["\\#literal", "trailing\\ ", "dir/*/deep"],
    ]
    probes = [
        "a.py",
        "keep.py",
        "sub/",
        "sub/x.py",
        "build/",
        "src/build/",
        "build",
        "debug.log",
        "logs/debug.log",
        "top.txt",
        "src/top.txt",
        "docs/a/b/c.tmp",
        "docs/c.tmp",
        "abc",
        "abbc",
        "Temp1",
        "temp/",
        "src/cache",
        "cache/",
        "x/y",
        "x/",
        "#literal",
        "trailing ",
        "dir/a/deep",
        "dir/a/b/deep",
        ".git/",
        "pkg/.git/",
        "m.pyc",
        "d/__pycache__/",
        "node_modules/",
        "lib/node_modules/",
        ".venv/",
        "notes.txt",
    ]
    for lines in rule_sets:
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        match = ignore_matcher(lines)
        for path in probes:
            assert match(path) == spec.match_file(path), (lines, path)


def test_the_default_ignore_rules_expression_matches_what_pathspec_matches():
    """The loader matches ``ALWAYS_IGNORED`` with its own expression (pathspec is imported
    only for a .gitignore); it must ignore exactly the paths pathspec ignores for them."""
    import pathspec

    from rlmd.context import _ALWAYS_IGNORED_RX, ALWAYS_IGNORED

    spec = pathspec.GitIgnoreSpec.from_lines(ALWAYS_IGNORED)
    names = [".git", ".hg", ".svn", "__pycache__", ".venv", "node_modules", ".tox"]
    names += ["git", "x.git", ".gitx", "a.pyc", ".pyc", "b.pyco", "pyc", "src", "venv", ".tox2"]
    probes = []
    for name in names:
        for prefix in ("", "src/", "a/b/"):
            for suffix in ("", "/", "/x.py", "/sub/"):
                probes.append(prefix + name + suffix)
    assert len(probes) == 17 * 3 * 4
    for path in probes:
        assert (_ALWAYS_IGNORED_RX.match(path) is not None) == spec.match_file(path), path


def test_a_file_is_read_to_its_end_or_one_byte_past_the_limit(tmp_path):
    """The loader reads the size fstat gave in one call, then on to the end: a file that
    grew since is read whole, or up to one byte over the limit (then counted oversized)."""
    from rlmd.context import _read_upto

    grown = tmp_path / "grown.txt"
    grown.write_bytes(b"x" * 200_000)
    with open(grown, "rb") as fh:  # fstat said 10 bytes
        assert _read_upto(fh.fileno(), 10, 1_000_000) == b"x" * 200_000
    with open(grown, "rb") as fh:
        assert _read_upto(fh.fileno(), 10, 100_000) == b"x" * 100_001
    with open(grown, "rb") as fh:
        assert _read_upto(fh.fileno(), 200_000, 200_000) == b"x" * 200_000
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with open(empty, "rb") as fh:
        assert _read_upto(fh.fileno(), 0, 10) == b""


async def test_a_deeply_nested_json_context_runs_or_is_refused_naming_the_file(tmp_path):
    """A .json context nested 900 levels deep ended ``rlmd run`` with a bare "maximum
    recursion depth exceeded" (the metadata's character count recursed per level, and
    what carries the context further recurses too); 5,000 levels named no file either.
    Up to MAX_NESTING levels it runs; deeper is refused, naming the file (and line)."""
    from helpers.scripted import repl, scripted_registry, turn_of

    from rlmd.context import MAX_NESTING
    from rlmd.engine import RunConfig, run_task

    deep = tmp_path / "deep.json"
    deep.write_text("[" * MAX_NESTING + '"needle"' + "]" * MAX_NESTING)
    ctx = load_context(deep)
    assert ctx.kind == "list" and ctx.chars() == len("needle")

    def root(messages):
        if turn_of(messages) == 0:
            return repl("x = context\nwhile isinstance(x, list):\n    x = x[0]\nprint(x)")
        return repl("FINAL(x)")

    registry = scripted_registry(root=root)
    try:
        result = await run_task(
            "What is inside?",
            ctx,
            RunConfig(root_model="root", sub_model="root"),
            get_model=registry.get,
        )
    finally:
        await registry.aclose()
    assert (result.status, result.answer) == ("completed", "needle")

    deep.write_text("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))
    with pytest.raises(ValueError, match=rf"deep.json: lists/dicts nested more than {MAX_NESTING}"):
        load_context(deep)
    deep.write_text("[" * 5000 + "]" * 5000)  # past what the JSON decoder itself takes
    with pytest.raises(ValueError, match="deep.json: JSON nested too deeply to load"):
        load_context(deep)
    lines = tmp_path / "deep.jsonl"  # a line is one level down in the lines' list
    lines.write_text('{"a": 1}\n' + "[" * MAX_NESTING + "]" * MAX_NESTING + "\n")
    with pytest.raises(ValueError, match=r"deep.jsonl:2: lists/dicts nested more than"):
        load_context(lines)
    nested: list = []
    for _ in range(MAX_NESTING):
        nested = [nested]
    with pytest.raises(ValueError, match="context: lists/dicts nested more than"):
        load_context(nested)  # the Python API's value


def test_a_json_context_with_a_bom_loads_and_a_huge_integer_names_the_file(tmp_path):
    """Review14: ``rlmd run --context data.json`` of a file saved with a byte-order mark
    was refused ('Unexpected UTF-8 BOM'), and an integer of 5,000 digits stopped the run
    with Python's bare 'Exceeds the limit (4300 digits)', naming no file or line."""
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf{"a": [1, 2]}')
    assert load_context(bom).value == {"a": [1, 2]}
    lines = tmp_path / "bom.jsonl"
    lines.write_bytes(b'\xef\xbb\xbf{"a": 1}\n{"b": 2}\n')
    assert load_context(lines).value == [{"a": 1}, {"b": 2}]
    huge = tmp_path / "huge.json"
    huge.write_text('{"a": ' + "9" * 5000 + "}")
    with pytest.raises(ValueError, match=r"huge.json: not valid JSON: Exceeds the limit"):
        load_context(huge)
    huge_lines = tmp_path / "huge.jsonl"
    huge_lines.write_text('{"a": 1}\n[' + "9" * 5000 + "]\n")
    with pytest.raises(ValueError, match=r"huge.jsonl:2: not valid JSON: Exceeds the limit"):
        load_context(huge_lines)
