"""Behaviour every sandbox backend shares (one suite, run against each backend)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from fakes.cloud import FAKE_BACKENDS
from helpers.sandbox_host import FakeHost, ok, run, started_mark, until_called

from rlmd.sandbox import BACKENDS, create_sandbox, unavailable_reason
from rlmd.sandbox.base import Sandbox, SandboxError

CODEBASE = {
    "README.md": "# demo\nA small project.\n",
    "src/app.py": "import os\n\n\ndef main():\n    print('hello')\n    return 0\n",
    "src/util/helpers.py": "def add(a, b):\n    return a + b\n\n\ndef TODO_later():\n    pass\n",
    "tests/test_app.py": "from src.app import main\n\n\ndef test_main():\n    assert main() == 0\n",
}


def available_backends() -> list[str]:
    """The backends that can start here; the others are reported as skipped, with why."""
    return [name for name in BACKENDS if unavailable_reason(name) is None]


@pytest.fixture(params=[*BACKENDS, *FAKE_BACKENDS])
async def sandbox(request, tmp_path, monkeypatch) -> Sandbox:
    host = FakeHost()
    if request.param in FAKE_BACKENDS:  # cloud backends on local fakes of their SDKs
        sb = FAKE_BACKENDS[request.param](tmp_path, monkeypatch, timeout_s=30)
    elif (reason := unavailable_reason(request.param)) is not None:
        pytest.skip(f"{request.param} cannot start here: {reason}")
    else:
        sb = create_sandbox(request.param, timeout_s=30)
    await sb.start(host)
    sb.host = host  # type: ignore[attr-defined]
    yield sb
    await sb.close()


# --------------------------------------------------------------------------- basics


def test_create_sandbox_unknown_name():
    with pytest.raises(ValueError, match="subprocess, inprocess"):
        create_sandbox("docker-please")


async def test_variables_persist(sandbox):
    await ok(sandbox, "x = 41\ndef inc(v):\n    return v + 1")
    r = await ok(sandbox, "y = inc(x)\nprint(y)")
    assert r.stdout == "42\n"
    assert await sandbox.get_variable("y") == 42


async def test_last_expression_is_echoed_like_a_repl(sandbox):
    r = await ok(sandbox, "x = 20\nx + 1")
    assert r.stdout == "21\n"
    r = await ok(sandbox, "print('only print')")  # None is not echoed
    assert r.stdout == "only print\n"
    r = await ok(sandbox, "'abc'")
    assert r.stdout == "'abc'\n"
    r = await ok(sandbox, "if x:\n    x + 1")  # only a trailing top-level expression echoes
    assert r.stdout == ""


async def test_error_keeps_earlier_assignments(sandbox):
    r = await run(sandbox, "a = 1\nb = [1, 2]\nc = 1 / 0\nd = 4")
    assert r.error is not None
    assert r.error.startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in r.error
    assert "c = 1 / 0" in r.error  # the cell's source line is shown
    assert "rlmd/kernel" not in r.error and "exec_cell" not in r.error
    assert {v.name for v in r.variables} == {"a", "b"}
    r = await ok(sandbox, "print(a, b)")
    assert r.stdout == "1 [1, 2]\n"
    with pytest.raises(KeyError):
        await sandbox.get_variable("d")


async def test_traceback_through_functions(sandbox):
    r = await run(sandbox, "def f():\n    raise ValueError('bad value')\n\nf()")
    assert "line 4, in <module>" in r.error
    assert "line 2, in f" in r.error
    assert r.error.rstrip().endswith("ValueError: bad value")


async def test_syntax_error(sandbox):
    r = await run(sandbox, "x = (1,\n")
    assert "SyntaxError" in r.error
    assert "Traceback" not in r.error  # nothing but the offending line
    assert r.variables == []


async def test_stdout_and_stderr_captured(sandbox):
    code = (
        "import sys\n"
        "print('out 1')\n"
        "print('err 1', file=sys.stderr)\n"
        "sys.stdout.write('out 2\\n')\n"
        "_ = sys.stdout.buffer.write('caf\\u00e9\\n'.encode())\n"
    )
    r = await ok(sandbox, code)
    assert r.stdout == "out 1\nout 2\ncafé\n"
    assert r.stderr == "err 1\n"
    r = await ok(sandbox, "print('next cell')")
    assert r.stdout == "next cell\n" and r.stderr == ""


async def test_output_cap_marker():
    for name in available_backends():
        sb = create_sandbox(name, max_output_chars=100)
        await sb.start(FakeHost())
        try:
            r = await ok(sb, "print('x' * 1000)")
            assert r.stdout.startswith("x" * 100)
            assert "901 more characters were dropped" in r.stdout
        finally:
            await sb.close()


async def test_sys_exit_is_an_error_and_state_is_kept(sandbox):
    await ok(sandbox, "kept = 'yes'")
    r = await run(sandbox, "import sys\nsys.exit(3)")
    assert "SystemExit: 3" in r.error
    assert "does not end the session" in r.error
    assert not r.kernel_restarted
    r = await run(sandbox, "exit()")
    assert "SystemExit" in r.error
    r = await ok(sandbox, "print(kept)")
    assert r.stdout == "yes\n"


async def test_variables_reported_per_cell(sandbox):
    r = await ok(sandbox, "s = 'abc' * 100\nn = 5\nimport json\n_private = 1")
    info = {v.name: v for v in r.variables}
    assert set(info) == {"s", "n"}  # modules and _names are not user variables
    assert info["s"].type == "str" and info["s"].size == 300
    assert len(info["s"].preview) <= 80 and info["s"].preview.startswith("'abcabc")
    assert info["n"].size is None and info["n"].preview == "5"
    r = await ok(sandbox, "n = 6\nm = s")
    assert {v.name for v in r.variables} == {"n", "m"}  # s untouched, not reported
    names = [v.name for v in await sandbox.list_variables()]
    assert names == ["s", "n", "m"]


async def test_input_is_unavailable(sandbox):
    r = await run(sandbox, "input('? ')")
    assert "EOFError" in r.error


async def test_concurrent_execute_is_serialised(sandbox):
    await ok(sandbox, "log = []")
    cells = [f"log.append({i})\nimport time\ntime.sleep(0.01)\nlog.append({i})" for i in range(5)]
    results = await asyncio.gather(*(sandbox.execute(c) for c in cells))
    assert all(r.error is None for r in results)
    log = await sandbox.get_variable("log")
    assert log == [i for i in range(5) for _ in range(2)]  # never interleaved


# --------------------------------------------------------------------------- reserved names


async def test_reserved_names_restored(sandbox):
    await sandbox.load_context("the context")
    r = await ok(sandbox, "context = 1\ndel llm_query\nFINAL = None\nhistory = 'mine'")
    assert set(r.restored) == {"context", "llm_query", "FINAL", "history"}
    assert r.variables == []  # reserved names are not user variables
    r = await ok(sandbox, "print(context)\nprint(llm_query('q'))\nFINAL('done')")
    assert r.stdout == "the context\nanswer to q\n"
    assert r.final == "done"
    assert r.restored == []


async def test_set_history(sandbox):
    await sandbox.set_variable("history", [{"role": "user", "content": "hi"}])
    r = await ok(sandbox, "print(history[0]['content'])\nhistory = None")
    assert r.stdout == "hi\n" and r.restored == ["history"]
    assert (await sandbox.get_variable("history"))[0]["content"] == "hi"
    with pytest.raises(ValueError, match="reserved"):
        await sandbox.set_variable("llm_query", 1)


# --------------------------------------------------------------------------- FINAL


async def test_final(sandbox):
    r = await ok(sandbox, "x = 6 * 7")
    assert r.final is None
    r = await ok(sandbox, "FINAL(x)")
    assert r.final == "42"
    r = await ok(sandbox, "print('no final here')")
    assert r.final is None


async def test_final_var(sandbox):
    r = await ok(sandbox, "answer = {'a': [1, 2]}\nFINAL_VAR('answer')")
    assert r.final == "{'a': [1, 2]}"
    r = await ok(sandbox, "FINAL_VAR(' \"answer\" ')")  # stray quotes and spaces are forgiven
    assert r.final == "{'a': [1, 2]}"


async def test_final_var_missing(sandbox):
    await ok(sandbox, "alpha = 1\nbeta = 2")
    r = await run(sandbox, "FINAL_VAR('gamma')")
    assert r.final is None
    assert "NameError" in r.error
    assert "'gamma'" in r.error and "alpha, beta" in r.error
    r = await run(sandbox, "FINAL_VAR(alpha)")
    assert "TypeError" in r.error and "FINAL(value)" in r.error


async def test_show_vars(sandbox):
    r = await ok(sandbox, "nums = list(range(10))\nname = 'x'\nshown = SHOW_VARS()")
    assert "nums: list (len 10)" in r.stdout
    assert "name: str (len 1)" in r.stdout
    shown = await sandbox.get_variable("shown")
    assert shown == {"nums": "list (len 10)", "name": "str (len 1)"}


# --------------------------------------------------------------------------- host calls


async def test_llm_query(sandbox):
    r = await ok(sandbox, "a = llm_query('hello')\nb = llm_query('hi', model='small')\nprint(a)")
    assert r.stdout == "answer to hello\n"
    assert await sandbox.get_variable("b") == "answer to hi by small"
    assert sandbox.host.calls == [
        ("llm_query", {"prompt": "hello", "model": None}),
        ("llm_query", {"prompt": "hi", "model": "small"}),
    ]


async def test_llm_query_batched(sandbox):
    r = await ok(sandbox, "out = llm_query_batched(['a', 'b', 'c'])\nprint(out)")
    assert r.stdout == "['answer to a', 'answer to b', 'answer to c']\n"
    assert sandbox.host.calls == [
        ("llm_query_batched", {"prompts": ["a", "b", "c"], "model": None})
    ]
    r = await run(sandbox, "llm_query_batched('not a list')")
    assert "TypeError" in r.error


async def test_rlm_query(sandbox):
    r = await ok(
        sandbox,
        "one = rlm_query('sum it', context=[1, 2, 3])\n"
        "many = rlm_query_batched(['p', 'q'], contexts=['x', {'k': 1}], model='m')",
    )
    assert await sandbox.get_variable("one") == "rlm(sum it, [1, 2, 3])"
    assert await sandbox.get_variable("many") == ["rlm(p, 'x')", "rlm(q, {'k': 1})"]
    assert sandbox.host.calls == [
        ("rlm_query", {"prompt": "sum it", "context": [1, 2, 3], "model": None}),
        (
            "rlm_query_batched",
            {"prompts": ["p", "q"], "contexts": ["x", {"k": 1}], "model": "m"},
        ),
    ]
    r = await run(sandbox, "rlm_query_batched(['a', 'b'], contexts=['x'])")
    assert "2 prompts but 1 contexts" in r.error


async def test_call_error_raises_in_cell(sandbox):
    r = await run(sandbox, "before = 1\nllm_query('fail')\nafter = 2")
    assert "RuntimeError: the model is down" in r.error
    r = await ok(
        sandbox,
        "try:\n    llm_query('crash')\nexcept RuntimeError as e:\n    msg = str(e)\nprint(msg)",
    )
    assert r.stdout == "KeyError: 'oops'\n"  # a broken handler is reported, not fatal
    assert await sandbox.get_variable("before") == 1
    with pytest.raises(KeyError):
        await sandbox.get_variable("after")


async def test_non_json_call_arguments(sandbox):
    r = await run(sandbox, "rlm_query('p', context={1, 2})")
    assert "TypeError" in r.error and "JSON" in r.error
    assert sandbox.host.calls == []


async def test_calls_from_threads(sandbox):
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "with ThreadPoolExecutor(4) as pool:\n"
        "    outs = list(pool.map(llm_query, [f'q{i}' for i in range(8)]))\n"
        "print(len(outs), outs[3])"
    )
    r = await ok(sandbox, code)
    assert r.stdout == "8 answer to q3\n"
    assert sorted(a["prompt"] for _, a in sandbox.host.calls) == [f"q{i}" for i in range(8)]


# --------------------------------------------------------------------------- codebase


@pytest.fixture
async def code_sandbox(sandbox) -> Sandbox:
    await sandbox.load_context(CODEBASE, codebase=True)
    return sandbox


async def test_codebase_context_bound(code_sandbox):
    r = await ok(code_sandbox, "print(sorted(context))")
    assert r.stdout == str(sorted(CODEBASE)) + "\n"


async def test_list_files(code_sandbox):
    await ok(
        code_sandbox,
        "a = list_files()\nb = list_files('*.py')\nc = list_files('src/*.py')\n"
        "d = list_files('src/**/*.py')\ne = list_files('tests/')\nf = list_files('*.rs')",
    )
    get = code_sandbox.get_variable
    assert await get("a") == sorted(CODEBASE)
    assert await get("b") == ["src/app.py", "src/util/helpers.py", "tests/test_app.py"]
    assert await get("c") == ["src/app.py"]
    assert await get("d") == ["src/app.py", "src/util/helpers.py"]
    assert await get("e") == ["tests/test_app.py"]
    assert await get("f") == []


async def test_read_file(code_sandbox):
    r = await ok(code_sandbox, "print(read_file('src/app.py'))")
    assert r.stdout.splitlines() == [
        "   1| import os",
        "   2| ",
        "   3| ",
        "   4| def main():",
        "   5|     print('hello')",
        "   6|     return 0",
    ]
    r = await ok(code_sandbox, "print(read_file('./src/app.py', 4, 5))")
    assert r.stdout == "   4| def main():\n   5|     print('hello')\n"
    r = await ok(code_sandbox, "print(read_file('src/app.py', start=6, end=100))")
    assert r.stdout == "   6|     return 0\n"


async def test_read_file_unknown_path(code_sandbox):
    r = await run(code_sandbox, "read_file('src/helpers.py')")
    assert "FileNotFoundError" in r.error
    assert "src/util/helpers.py" in r.error  # suggestion
    r = await run(code_sandbox, "read_file('src/util')")
    assert "is a folder" in r.error


async def test_grep(code_sandbox):
    r = await ok(code_sandbox, "hits = grep(r'def \\w+\\(')")
    assert await code_sandbox.get_variable("hits") == [
        "src/app.py:4:def main():",
        "src/util/helpers.py:1:def add(a, b):",
        "src/util/helpers.py:5:def TODO_later():",
        "tests/test_app.py:4:def test_main():",
    ]
    await ok(code_sandbox, "hits = grep('todo', ignore_case=True)")
    assert await code_sandbox.get_variable("hits") == ["src/util/helpers.py:5:def TODO_later():"]
    await ok(code_sandbox, "hits = grep('def', path_glob='tests/*')")
    assert await code_sandbox.get_variable("hits") == ["tests/test_app.py:4:def test_main():"]
    r = await ok(code_sandbox, "hits = grep('def', max_results=2)")
    assert len(await code_sandbox.get_variable("hits")) == 2
    assert "max_results=2" in r.stderr


async def test_grep_bad_regex(code_sandbox):
    r = await run(code_sandbox, "grep('foo(')")
    assert "ValueError: grep: invalid regular expression 'foo('" in r.error


async def test_helpers_survive_context_rebinding(code_sandbox):
    r = await ok(
        code_sandbox,
        "context = None\nprint(len(list_files()))\nprint(read_file('README.md', 1, 1))",
    )
    assert r.stdout == "4\n   1| # demo\n"
    assert "context" in r.restored
    r = await ok(code_sandbox, "del grep\ncontext = {}")
    assert set(r.restored) == {"grep", "context"}
    await ok(code_sandbox, "hits = grep('hello')")
    assert await code_sandbox.get_variable("hits") == ["src/app.py:5:    print('hello')"]


async def test_plain_context_has_no_codebase_helpers(sandbox):
    await sandbox.load_context(CODEBASE, codebase=True)
    await sandbox.load_context(["a", "b"])
    r = await run(sandbox, "print(context)\nlist_files()")
    assert r.stdout == "['a', 'b']\n"
    assert "NameError" in r.error


async def test_codebase_must_be_a_dict_of_text(sandbox):
    with pytest.raises(ValueError):
        await sandbox.load_context(["not", "a", "dict"], codebase=True)


# --------------------------------------------------------------------------- tools & variables


async def test_user_tools(sandbox):
    await sandbox.define_tools(["search", "broken"], {"LIMIT": 10, "config": {"mode": "fast"}})
    r = await ok(sandbox, "out = search('cats', 3, sort=True)\nprint(LIMIT, config['mode'])")
    assert r.stdout == "10 fast\n"
    assert await sandbox.get_variable("out") == {
        "tool": "search",
        "args": ["cats", 3],
        "kwargs": {"sort": True},
    }
    assert sandbox.host.calls == [
        ("tool", {"name": "search", "args": ["cats", 3], "kwargs": {"sort": True}})
    ]
    r = await run(sandbox, "broken()")
    assert "RuntimeError: tool exploded" in r.error
    r = await ok(sandbox, "LIMIT = 0\nsearch = None")
    assert set(r.restored) == {"LIMIT", "search"}
    assert await sandbox.get_variable("LIMIT") == 10


@pytest.mark.parametrize("name", ["llm_query", "FINAL", "context", "grep", "not valid"])
async def test_tool_with_reserved_name(sandbox, name):
    with pytest.raises(ValueError):
        await sandbox.define_tools([name], {})
    with pytest.raises(ValueError):
        await sandbox.define_tools([], {name: 1})


async def test_set_get_list_variables(sandbox):
    await sandbox.set_variable("data", {"k": [1, 2, 3]})
    r = await ok(sandbox, "data['k'].append(4)\nobj = object()\nt = (1, 'a')")
    assert await sandbox.get_variable("data") == {"k": [1, 2, 3, 4]}
    assert (await sandbox.get_variable("obj")).startswith("<object object at")
    assert await sandbox.get_variable("t") == [1, "a"]
    with pytest.raises(KeyError):
        await sandbox.get_variable("nope")
    infos = {v.name: v for v in await sandbox.list_variables()}
    assert set(infos) == {"data", "obj", "t"}
    assert infos["data"].type == "dict" and infos["data"].size == 1
    assert r.variables and {v.name for v in r.variables} == {"obj", "t"}
    with pytest.raises(TypeError):
        await sandbox.set_variable("bad", {1, 2})


async def test_variables_page_through_every_backend_alike(sandbox):
    await ok(
        sandbox,
        "import json\nfor i in range(25):\n    globals()[f'v{i:02d}'] = i\ndel i\nZ = 'z'\n_x = 1",
    )
    seen, offset, pages = [], 0, 0
    while offset is not None:
        page = await sandbox.list_variables_page(offset, 10)
        assert page.total == 26 and page.offset == offset and len(page.variables) <= 10
        seen += [v.name for v in page.variables]
        offset, pages = page.next_offset, pages + 1
    assert pages == 3 and seen == ["Z", *(f"v{i:02d}" for i in range(25))]
    assert {v.name: v.preview for v in (await sandbox.list_variables_page(0, 2)).variables} == {
        "Z": "'z'",
        "v00": "0",
    }
    found = await sandbox.list_variables_page(0, 5, "v1")
    assert [v.name for v in found.variables] == [f"v{i}" for i in range(10, 15)]
    assert found.total == 10 and found.next_offset == 5
    defined = await sandbox.list_variables_page(0, 3, by_name=False)  # the REPL's order
    assert [v.name for v in defined.variables] == ["v00", "v01", "v02"] and defined.total == 26
    counted = await sandbox.list_variables_page(0, 0)
    assert counted.total == 26 and counted.variables == [] and counted.next_offset is None
    past = await sandbox.list_variables_page(30, 10)
    assert past.variables == [] and past.next_offset is None and past.total == 26
    for offset, limit in ((-1, 10), (0, -1), (0, 2001), (True, 10)):
        with pytest.raises(ValueError):
            await sandbox.list_variables_page(offset, limit)
    assert len(await sandbox.list_variables()) == 26  # the full listing is as it was


async def test_big_string_context(sandbox):
    big = "abcdefghij" * 1_000_000  # 10 MB
    t0 = time.perf_counter()
    await sandbox.load_context(big)
    elapsed = time.perf_counter() - t0
    # typically ~0.1 s for the subprocess backend; the bound only catches a pathological
    # transfer (per-character or quadratic), so it is generous for a loaded machine
    assert elapsed < 30.0, elapsed
    r = await ok(sandbox, "print(len(context), context[-3:])")
    assert r.stdout == "10000000 hij\n"


# --------------------------------------------------------------------------- timeouts


STUBBORN_LOOP = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"


async def test_timeout_subprocess_interrupts_and_keeps_state():
    sb = create_sandbox("subprocess", timeout_s=30)
    await sb.start(FakeHost())
    try:
        await ok(sb, "a = 1")
        r = await run(sb, "b = 2\nprint('working')\nwhile True:\n    pass", timeout_s=0.5)
        assert r.timed_out and not r.kernel_restarted
        assert "wall-clock time limit 0.5 s exceeded" in r.error
        assert "KeyboardInterrupt" in r.error
        assert r.stdout == "working\n"
        assert (await ok(sb, "print(a, b)")).stdout == "1 2\n"
    finally:
        await sb.close()


async def test_timeout_subprocess_restarts_and_rebinds():
    host = FakeHost()
    sb = create_sandbox("subprocess", timeout_s=600, interrupt_grace_s=0.3)
    await sb.start(host)
    try:
        await sb.load_context("still here")
        await sb.define_tools(["search"], {"LIMIT": 3})
        await ok(sb, "a = 1\nb = 'two'")
        old_pid = sb.pid
        t0 = time.perf_counter()
        r = await run(sb, "c = 3\n" + STUBBORN_LOOP, timeout_s=0.5)
        assert time.perf_counter() - t0 < 60  # the cell's 0.5 s, not the sandbox's 600 s
        assert r.timed_out and r.kernel_restarted
        assert r.lost_variables == ["a", "b"]
        assert "timed out after 0.5 s" in r.error and "did not stop" in r.error
        assert "variables lost: a, b" in r.error
        assert sb.pid != old_pid
        r = await ok(sb, "print(context, LIMIT, search('x')['tool'])")
        assert r.stdout == "still here 3 search\n"
        r = await run(sb, "print(a)")
        assert "NameError" in r.error
    finally:
        await sb.close()


async def test_timeout_inprocess_interrupts_python_loop():
    sb = create_sandbox("inprocess", timeout_s=30)
    await sb.start(FakeHost())
    try:
        await ok(sb, "a = 1")
        r = await run(sb, "b = 2\nprint('working')\nwhile True:\n    pass", timeout_s=0.3)
        assert r.timed_out and not r.kernel_restarted
        assert "timed out after 0.3 s" in r.error and "CellInterrupted" in r.error
        assert r.stdout == "working\n"
        r = await ok(sb, "print(a, b)")
        assert r.stdout == "1 2\n"
    finally:
        await sb.close()


async def test_two_inprocess_sandboxes_never_move_the_process_working_directory():
    """Reported against the reference library (``os.chdir`` in its local REPL): two
    in-process sandboxes ran in each other's folders. Neither changes the process-wide
    working directory; each one's files stay in its own folder."""
    here = os.getcwd()
    a, b = create_sandbox("inprocess", timeout_s=30), create_sandbox("inprocess", timeout_s=30)
    await a.start(FakeHost())
    await b.start(FakeHost())
    try:
        await a.upload("mine.txt", b"a")
        await b.upload("mine.txt", b"b")
        assert (await ok(a, "import os\nprint(os.getcwd())")).stdout == here + "\n"
        assert (await ok(b, "import os\nprint(os.getcwd())")).stdout == here + "\n"
        assert os.getcwd() == here
        assert a.workdir != b.workdir
        assert (await a.download("mine.txt"), await b.download("mine.txt")) == (b"a", b"b")
    finally:
        await a.close()
        await b.close()


async def test_inprocess_cells_share_one_worker_thread():
    """One persistent worker thread runs the cells; an interrupt that times a cell out never
    reaches the idle worker or a later cell."""
    sb = create_sandbox("inprocess", timeout_s=30)
    await sb.start(FakeHost())
    try:
        first = (await ok(sb, "import threading\nprint(threading.get_ident())")).stdout
        assert (await ok(sb, "print(threading.get_ident())")).stdout == first
        r = await run(sb, "n = 0\nwhile True:\n    n += 1", timeout_s=0.2)
        assert r.timed_out and not r.kernel_restarted
        for _ in range(50):
            await ok(sb, "x = sum(range(2000))\ny = [i * i for i in range(200)]")
        assert (
            await ok(sb, "print(threading.get_ident(), x)")
        ).stdout == f"{first.strip()} 1999000\n"
        assert sb._worker is not None and sb._worker.interrupt() is False  # idle: no effect
        await ok(sb, "print(llm_query('ping'))")
    finally:
        await sb.close()


async def test_timeout_inprocess_blocked_thread_is_abandoned():
    sb = create_sandbox("inprocess", timeout_s=30, interrupt_grace_s=0.2)
    await sb.start(FakeHost())
    try:
        await sb.load_context("ctx")
        await ok(sb, "a = 1")
        r = await run(sb, "import time\ntime.sleep(3)", timeout_s=0.2)
        assert r.timed_out and r.kernel_restarted
        assert r.lost_variables == ["a"]
        assert "could not be interrupted" in r.error
        r = await ok(sb, "print(context)")
        assert r.stdout == "ctx\n"
        assert sb.abandoned_threads == 1  # the stuck worker was replaced by a new one
    finally:
        await sb.close()


async def test_timeout_cancels_a_pending_tool_call_and_names_the_tool():
    for name in available_backends():
        sb = create_sandbox(name, timeout_s=600)
        await sb.start(FakeHost(delay=600))
        try:
            await sb.define_tools(["slow_lookup"], {})
            t0 = time.perf_counter()
            r = await run(sb, "x = slow_lookup()", timeout_s=0.3)
            assert r.timed_out, name
            assert "waiting on the host tool 'slow_lookup'" in r.error, (name, r.error)
            assert time.perf_counter() - t0 < 60  # the cell's 0.3 s, not the tool's 600 s
            r = await ok(sb, "print('alive')")
            assert r.stdout == "alive\n"
        finally:
            await sb.close()


async def test_time_blocked_on_sub_calls_is_not_counted_in_the_cell_limit():
    # issue 11 #16: a cell that only waits on slow sub-calls keeps their results.
    for name in available_backends():
        sb = create_sandbox(name, timeout_s=30)
        # Each call waits twice the cell's limit; the limit leaves a loaded machine 1.5 s
        # for the cell's own few milliseconds.
        await sb.start(FakeHost(delay=3.0))
        try:
            r = await ok(sb, "x = llm_query('slow')\nprint(x)", timeout_s=1.5)
            assert r.stdout == "answer to slow\n", name
            r = await ok(sb, "print(llm_query_batched(['a', 'b']))", timeout_s=1.5)
            assert r.stdout == "['answer to a', 'answer to b']\n", name
            # its own time still counts
            r = await run(sb, "import time\nwhile True: time.sleep(0.01)", timeout_s=0.5)
            assert r.timed_out, name
        finally:
            await sb.close()


async def test_the_run_wall_clock_still_bounds_a_cell_blocked_on_sub_calls():
    for name in available_backends():
        sb = create_sandbox(name, timeout_s=600)
        await sb.start(FakeHost(delay=600))
        try:
            t0 = time.perf_counter()
            r = await run(sb, "x = llm_query('slow')", timeout_s=0.3, wall_limit_s=1.0)
            assert r.timed_out, name
            assert time.perf_counter() - t0 < 60  # the 1 s wall limit, not the 600 s call
            assert "after 1 s" in r.error, r.error
        finally:
            await sb.close()


# --------------------------------------------------------------------------- lifecycle


async def test_close_twice_and_use_after_close():
    for name in available_backends():
        sb = create_sandbox(name)
        await sb.start(FakeHost())
        await sb.close()
        await sb.close()
        with pytest.raises(SandboxError):
            await sb.execute("1")


async def test_isolation_is_reported():
    sub = create_sandbox("subprocess")
    inp = create_sandbox("inprocess")
    assert sub.isolation["isolated"] is True and sub.isolation["process"] is True
    assert sub.isolation["env"] == "clean"
    assert sub.isolation["limits"] == sub.limits.to_dict()
    assert inp.isolation["isolated"] is False and inp.isolation["network"] == "host"
    assert inp.isolation["enforced"]["memory_bytes"] is None  # recorded as not enforced
    assert sub.kind == "subprocess" and inp.kind == "inprocess"


async def test_cancelled_execute_stops_the_cell(sandbox):
    await ok(sandbox, "kept = 1")
    # its own limit is far off: only the cancel can stop it in time
    cell = started_mark() + "while True:\n    pass"
    task = asyncio.create_task(sandbox.execute(cell, timeout_s=600))
    await until_called(sandbox.host)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    t0 = time.perf_counter()
    r = await ok(sandbox, "print('next')", timeout_s=120)
    assert r.stdout == "next\n"
    assert time.perf_counter() - t0 < 60  # stopped, not left spinning until the 120 s limit
    if sandbox.kind in ("subprocess", "inprocess"):  # the loop was interrupted: state kept
        assert not r.kernel_restarted
        assert await sandbox.get_variable("kept") == 1


async def test_start_again_keeps_the_repl_and_swaps_the_handler(sandbox):
    await ok(sandbox, "memo = 'kept'")
    second = FakeHost()
    await sandbox.start(second)
    r = await ok(sandbox, "print(memo, llm_query('again'))")
    assert r.stdout == "kept answer to again\n"
    assert second.calls == [("llm_query", {"prompt": "again", "model": None})]
    assert sandbox.host.calls == []


# --------------------------------------------------------------------------- control and files


async def test_interrupt_keeps_the_state(sandbox):
    await ok(sandbox, "kept = 'yes'")
    assert await sandbox.interrupt() is False  # nothing running
    looping = "n = 0\n" + started_mark("n > 0") + "while True:\n    n += 1"
    task = asyncio.create_task(sandbox.execute(looping, timeout_s=600))  # only the interrupt
    await until_called(sandbox.host)
    assert await sandbox.interrupt() is True
    r = await asyncio.wait_for(task, 60)
    assert not r.kernel_restarted
    assert "KeyboardInterrupt" in r.error or "interrupted" in r.error
    r = await ok(sandbox, "print(kept, n > 0)")
    assert r.stdout == "yes True\n"


async def test_state_follows_the_lifecycle(sandbox):
    from rlmd.sandbox.session import SandboxState

    assert sandbox.state is SandboxState.READY
    task = asyncio.create_task(sandbox.execute("n = 0\nwhile True:\n    n += 1"))
    deadline = time.monotonic() + 30
    while sandbox.state is not SandboxState.RUNNING and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert sandbox.state is SandboxState.RUNNING
    assert await sandbox.interrupt() is True
    await asyncio.wait_for(task, 30)
    assert sandbox.state is SandboxState.READY
    await sandbox.close()
    assert sandbox.state is SandboxState.CLOSED


def test_a_new_sandbox_is_stopped():
    from rlmd.sandbox.session import SandboxState

    for name in ("subprocess", "inprocess"):
        assert create_sandbox(name).state is SandboxState.STOPPED


async def test_interrupt_escalates_to_a_restart():
    for name in ("subprocess",):  # inprocess: covered by its blocked-thread test
        sb = create_sandbox(name, timeout_s=600, interrupt_grace_s=0.3)  # only the interrupt
        host = FakeHost()
        await sb.start(host)
        try:
            await sb.load_context("ctx")
            await ok(sb, "lost_one = 1")
            # a cell that swallows every interrupt, marked started once inside its `try`
            stubborn = (
                "_in = False\n"
                + started_mark("_in")
                + STUBBORN_LOOP.replace("    try:\n", "    try:\n        _in = True\n")
            )
            task = asyncio.create_task(sb.execute(stubborn))
            await until_called(host)
            assert await sb.interrupt() is True
            r = await asyncio.wait_for(task, 60)
            assert r.kernel_restarted and r.lost_variables == ["lost_one"]
            assert "did not stop" in r.error
            assert (await ok(sb, "print(context)")).stdout == "ctx\n"
        finally:
            await sb.close()


async def test_interrupt_fails_a_pending_host_call(sandbox):
    sandbox.host.delay = 600
    task = asyncio.create_task(sandbox.execute("x = llm_query('slow')", timeout_s=600))
    await until_called(sandbox.host, "slow")  # the call is pending (for 600 s)
    assert await sandbox.interrupt() is True
    r = await asyncio.wait_for(task, 60)
    assert r.error is not None
    if sandbox.kind in ("subprocess", "inprocess"):  # the call fails; the REPL stays
        assert not r.kernel_restarted
    sandbox.host.delay = 0
    assert (await ok(sandbox, "print(llm_query('fast'))")).stdout == "answer to fast\n"


async def test_restart_rebinds_and_reports_lost_variables(sandbox):
    await sandbox.load_context("ctx")
    await sandbox.define_tools([], {"LIMIT": 3})
    await ok(sandbox, "a = 1\nb = 2")
    await ok(sandbox, "a = 3")  # no names in its result (the same ones): a and b are kept
    before = (await sandbox.health())["restarts"]
    assert await sandbox.restart() == ["a", "b"]
    assert (await sandbox.health())["restarts"] == before + 1
    r = await ok(sandbox, "print(context, LIMIT, 'a' in dir())")
    assert r.stdout == "ctx 3 False\n"


async def test_upload_and_download(sandbox):
    await sandbox.upload("data/in.txt", b"hello\x00bytes")
    assert await sandbox.download("data/in.txt") == b"hello\x00bytes"
    if sandbox.kind != "inprocess":  # the in-process REPL runs in the host's folder
        r = await ok(sandbox, "print(open('data/in.txt', 'rb').read())")
        assert r.stdout == "b'hello\\x00bytes'\n"
        await ok(sandbox, "open('out.bin', 'wb').write(b'made inside')")
        assert await sandbox.download("out.bin") == b"made inside"
    for bad in ("../escape", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(ValueError):
            await sandbox.upload(bad, b"x")
        with pytest.raises(ValueError):
            await sandbox.download(bad)
    with pytest.raises(FileNotFoundError):
        await sandbox.download("missing.txt")


async def test_download_refuses_a_file_over_max_bytes(sandbox):
    await sandbox.upload("big.bin", b"x" * 1000)
    assert await sandbox.download("big.bin", max_bytes=1000) == b"x" * 1000
    with pytest.raises(ValueError, match="larger than the 999 bytes allowed"):
        await sandbox.download("big.bin", max_bytes=999)


async def test_variables_go_to_a_file_and_back_through_the_kernel(sandbox):
    """A workspace checkpoint's path: the kernel writes the saveable variables' JSON to a
    file in its folder, the host moves the bytes, the kernel binds them again."""
    await ok(sandbox, "s = 'text'\nn = [1, {'k': None}]\nt = [(1, 2)]\nf = len\nx = float('nan')")
    names = ["s", "n", "t", "f", "x", "gone"]
    out = await sandbox.save_variables(names, ".vars.json", max_var_bytes=100, max_total_bytes=1)
    assert set(out["saved"]) == {"s", "n"} and out["saved"]["n"]["bytes"] == 14
    assert out["saved"]["s"] == {"name": "s", "type": "str", "size": 4, "preview": "'text'",
                                 "bytes": 6}  # fmt: skip
    assert "changes when written as JSON" in out["skipped"]["t"]
    assert "a builtin_function_or_method" in out["skipped"]["f"]
    assert "not JSON-serialisable (ValueError)" in out["skipped"]["x"]  # NaN
    assert out["skipped"]["gone"] == "vanished during the checkpoint"
    data = await sandbox.download(".vars.json")
    assert data == b'{"s":"text","n":[1,{"k":null}]}' and out["bytes"] == len(data)
    await sandbox.remove_file(".vars.json")
    await sandbox.remove_file(".vars.json")  # not there: fine
    with pytest.raises(FileNotFoundError):
        await sandbox.download(".vars.json")

    await ok(sandbox, "s = 'changed'\ndel n")
    await sandbox.upload(".back.json", data)
    back = await sandbox.load_variables(".back.json", ["s", "n"], only_missing=True)
    assert back == {"restored": ["n"], "missing": {}}  # s exists: left alone
    r = await ok(sandbox, "print(s, n)")
    assert r.stdout == "changed [1, {'k': None}]\n"
    with pytest.raises(FileNotFoundError):  # the kernel removed it
        await sandbox.download(".back.json")
    await sandbox.upload(".back.json", data)
    back = await sandbox.load_variables(".back.json", ["s", "other", "history"])
    assert back["restored"] == ["s"] and back["missing"]["other"] == "not in the saved values"
    assert "history" in back["missing"]
    assert (await ok(sandbox, "print(s)")).stdout == "text\n"
    await sandbox.upload(".back.json", b"[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        await sandbox.load_variables(".back.json", ["s"])
    for bad in ("../up.json", "a/b.json", "", ".."):
        with pytest.raises(ValueError, match="one plain name"):
            await sandbox.save_variables(["s"], bad, max_var_bytes=100, max_total_bytes=100)
    assert (await ok(sandbox, "print(s)")).stdout == "text\n"  # the REPL is fine


async def test_every_variable_is_saved_with_what_was_saved_in_a_file(sandbox):
    """A checkpoint of a workspace of 200,000 variables: no names sent (``None``: every user
    variable), and what was saved and skipped comes in a file, the reply holding counts (as
    a reply frame it was ~15 MB decoded on the daemon's event loop)."""
    await ok(sandbox, "s = 'text'\nn = [1]\nf = len\n_hidden = 1\nimport json")
    out = await sandbox.save_variables(
        None, ".vars.json", max_var_bytes=100, max_total_bytes=100, info_path=".info.json"
    )
    info = json.loads(await sandbox.download(".info.json"))
    assert out == {
        "bytes": 20,
        "saved_count": 2,
        "skipped_count": 1,
        "info_bytes": out["info_bytes"],
    }
    assert list(info["saved"]) == ["s", "n"] and list(info["skipped"]) == ["f"]
    assert info["saved"]["n"] == {"name": "n", "type": "list", "size": 1, "preview": "[1]",
                                  "bytes": 3}  # fmt: skip
    assert out["info_bytes"] == len(await sandbox.download(".info.json"))
    assert await sandbox.download(".vars.json") == b'{"s":"text","n":[1]}'


async def test_saving_variables_runs_none_of_their_methods(sandbox):
    """The round trip's ``==`` ran model code: a list holding an ``int`` subclass whose
    ``__eq__`` never returns held ``save_vars`` until the op timeout (the kernel restarted,
    the workspace stopped; review21). Exact types are checked instead."""
    await ok(sandbox, "class Stuck(int):\n    def __eq__(self, other):\n        while True: pass\n"
                      "    __hash__ = int.__hash__\n"
                      "odd = [Stuck(1)]\nkeyed = {Stuck(2): 'x'}\nfine = [1, {'a': [True, None, 2.5]}]")  # fmt: skip
    names = ["odd", "keyed", "fine"]
    out = await sandbox.save_variables(names, ".vars.json", max_var_bytes=100, max_total_bytes=100)
    assert list(out["saved"]) == ["fine"]
    assert all("changes when written as JSON" in out["skipped"][n] for n in ("odd", "keyed"))
    assert await sandbox.download(".vars.json") == b'{"fine":[1,{"a":[true,null,2.5]}]}'


async def test_a_link_planted_where_the_kernel_saves_variables_is_replaced(sandbox):
    if sandbox.kind == "inprocess":
        pytest.skip("the in-process REPL runs in the host's folder, not its working folder")
    await ok(sandbox, "import os\nopen('keep.txt', 'w').write('mine')\n"
                      "os.symlink('keep.txt', '.vars.json')\nv = 1")  # fmt: skip
    await sandbox.save_variables(["v"], ".vars.json", max_var_bytes=100, max_total_bytes=100)
    assert await sandbox.download(".vars.json") == b'{"v":1}'  # a file, not the link
    assert await sandbox.download("keep.txt") == b"mine"


async def test_a_symlink_planted_inside_cannot_leak_host_files(sandbox):
    if sandbox.kind not in ("subprocess", "container"):
        pytest.skip(f"{sandbox.kind}: its working folder is not on the host")
    await ok(sandbox, "import os\nos.symlink('/etc/hostname', 'link')")
    with pytest.raises(ValueError):
        await sandbox.download("link")


async def test_health(sandbox):
    health = await sandbox.health()
    assert health["alive"] is True
    assert isinstance(health["restarts"], int)
    await sandbox.close()
    assert (await sandbox.health())["alive"] is False


async def test_limits_and_their_aliases():
    from rlmd.sandbox.limits import Limits

    for name in ("subprocess", "inprocess"):
        sb = create_sandbox(name, limits=Limits(wall_s=5, output_bytes=100), timeout_s=7)
        assert sb.limits.wall_s == 7 and sb.limits.output_bytes == 100
        assert sb.isolation["limits"]["wall_s"] == 7
        assert create_sandbox(name).limits == Limits()


async def test_a_100_mb_context_loads_through_a_file():
    big = "0123456789" * 10_000_000
    for name in ("subprocess", "inprocess"):
        sb = create_sandbox(name)
        await sb.start(FakeHost())
        try:
            await sb.load_context(big)
            r = await ok(sb, "print(len(context), context[-3:])")
            assert r.stdout == "100000000 789\n"
            if name == "subprocess":
                assert not [f for f in os.listdir(sb.workdir) if f.startswith(".rlmd-context")]
                await sb.restart()  # re-bound after a restart
                assert (await ok(sb, "print(len(context))")).stdout == "100000000\n"
        finally:
            await sb.close()


async def test_a_large_codebase_goes_through_a_file_off_the_event_loop(monkeypatch):
    # Encoding a codebase as one JSON frame took 0.58 s on the event loop for the stdlib (the
    # daemon answered nobody meanwhile); now it is written to a file in a worker thread.
    from rlmd.sandbox import files

    files_seen: list[str] = []
    real = files.write_new

    def spy(folder, prefix, chunks, uid=None):
        files_seen.append(prefix)
        return real(folder, prefix, chunks, uid)

    monkeypatch.setattr("rlmd.sandbox.process.transport.write_new", spy)
    codebase = {f"pkg/m{i}.py": f"def f{i}():\n    return '\\ud800 {i}'\n" * 900 for i in range(40)}
    # Every kind of text survives the file: non-ASCII, astral, lone surrogates, empty.
    codebase |= {"é/ü.md": "naïve 🐍\n" * 50, "bad\udcff.txt": "x\udcffy\ud800", "empty": ""}
    sb = create_sandbox("subprocess")
    await sb.start(FakeHost())
    try:
        await sb.load_context(codebase, codebase=True)
        assert files_seen == [".rlmd-context-codebase-"]
        await sb.set_variable(
            "expected", {k: v.encode("utf-8", "surrogatepass").hex() for k, v in codebase.items()}
        )
        r = await ok(
            sb,
            "print({k: v.encode('utf-8', 'surrogatepass').hex() for k, v in context.items()}"
            " == expected)",
        )
        assert r.stdout == "True\n"
        r = await ok(
            sb,
            "print(len(context), context['pkg/m7.py'][:20] == "
            + repr(codebase["pkg/m7.py"][:20])
            + ")",
        )
        assert r.stdout == "43 True\n"
        assert (await ok(sb, "print(len(list_files('pkg/*.py')))")).stdout == "40\n"
        assert not [f for f in os.listdir(sb.workdir) if f.startswith(".rlmd-context")]
    finally:
        await sb.close()


async def test_a_values_file_cannot_bind_reserved_or_private_names(sandbox):
    """Review21: ``load_vars`` bound any name the host listed with ``set_var``, which sets
    ``history`` (and a value tool's name) for the host: a ``checkpoint.json`` naming them
    replaced the REPL's history, and ``_``-names (``__builtins__``) were bound too. A
    checkpoint only ever holds user variables, so only those are bound back."""
    await sandbox.set_variable("history", [{"role": "user", "content": "hi"}])
    data = b'{"history": "forged", "__builtins__": {}, "_hidden": 1, "fine": 2}'
    await sandbox.upload(".back.json", data)
    names = ["history", "__builtins__", "_hidden", "fine"]
    back = await sandbox.load_variables(".back.json", names)
    assert back["restored"] == ["fine"]
    assert all("not a user variable" in back["missing"][n] for n in names[:3]), back
    r = await ok(sandbox, "print(history[0]['content'], fine, len(dir(__builtins__)) > 10)")
    assert r.stdout == "hi 2 True\n"


async def test_a_fifo_where_the_kernel_reads_variables_is_refused_not_waited_on(sandbox):
    """Review21: ``load_vars`` opened the file without ``O_NONBLOCK``: a FIFO that model code
    (a thread of its own) put there after the host's upload blocked the kernel until the
    operation timed out and the kernel was killed with every variable."""
    if sandbox.kind == "inprocess":
        pytest.skip("the in-process REPL runs in the host's folder, not its working folder")
    await ok(sandbox, "import os\nos.mkfifo('.back.json')\nkeep = 1")
    with pytest.raises(ValueError, match="not a regular file"):
        await asyncio.wait_for(sandbox.load_variables(".back.json", ["keep"]), 20)
    assert (await ok(sandbox, "print(keep)")).stdout == "1\n"


async def test_a_cloud_download_over_max_bytes_is_refused_before_it_is_read(sandbox, monkeypatch):
    """Review21: the providers' APIs read a file whole, so ``max_bytes`` was checked only
    after the whole file was in the daemon's memory: model code that wrote gigabytes where
    the kernel saves the variables (its VM's disk is not capped by rlmd) filled the daemon.
    The file's size is now checked in the VM first."""
    transport = getattr(sandbox, "transport", None)
    if not hasattr(transport, "provider"):
        pytest.skip(f"{sandbox.kind}: not a cloud VM")
    await ok(sandbox, "open('big.bin', 'wb').write(b'x' * 5000)")
    reads = []
    read_file = transport.provider.read_file

    async def counted(path):
        reads.append(path)
        return await read_file(path)

    monkeypatch.setattr(transport.provider, "read_file", counted)
    with pytest.raises(ValueError, match="larger than the 4,999 bytes allowed"):
        await sandbox.download("big.bin", max_bytes=4999)
    assert reads == []
    assert await sandbox.download("big.bin", max_bytes=5000) == b"x" * 5000
    with pytest.raises(FileNotFoundError):
        await sandbox.download("none.bin", max_bytes=5000)
