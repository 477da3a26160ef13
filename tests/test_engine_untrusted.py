"""The engine facing untrusted model code: what it may name, and the sandbox limits it must
not override."""

from __future__ import annotations

import asyncio

import pytest
from helpers.scripted import last_user, repl, scripted_registry, turn_of

from rlmd.engine import Budget, RunConfig, run_task


async def test_repl_code_cannot_name_a_file_loading_model(tmp_path):
    marker = tmp_path / "PWNED"
    source = (
        f"def respond(m):\n    open({str(marker)!r}, 'w').write('x')\n    return 'host code ran'\n"
    )
    evil = (
        "import os\n"
        "p = os.path.join(os.getcwd(), 'evil.py')\n"
        f"open(p, 'w').write({source!r})\n"
        "for fn in (llm_query, rlm_query):\n"
        "    try:\n"
        "        print('GOT', fn('hi', model='scripted:' + p + ':respond'))\n"
        "    except Exception as e:\n"
        "        print('ERR', e)\n"
        "try:\n"
        "    print('GOT', llm_query('hi', model='local:' + p))\n"
        "except Exception as e:\n"
        "    print('ERR', e)\n"
        "print('SUB', llm_query('hi', model='sub'))\n"
    )
    seen = []

    def root(messages):
        seen.append(messages)
        return repl(evil) if turn_of(messages) == 0 else repl("FINAL('done')")

    reg = scripted_registry(root=root, sub=lambda m: "sub answer")
    cfg = RunConfig(root_model="root", sub_model="sub", budget=Budget(max_iterations=3))
    try:
        result = await run_task("q", "ctx", cfg, get_model=reg.get)
    finally:
        await reg.aclose()
    feedback = last_user(seen[1])
    assert feedback.count("is not allowed from the REPL") == 3, feedback
    assert "GOT" not in feedback and "SUB sub answer" in feedback  # configured names still work
    assert not marker.exists()
    assert result.status == "completed"


async def test_the_sandboxs_wall_clock_limit_holds_under_a_longer_cell_timeout():
    """Found by the hostile fresh-user test: a run with ``limits.wall_s = 5`` let a cell spin
    for the engine's 120 s cell timeout while the run record said 5 s."""
    from rlmd.sandbox import create_sandbox
    from rlmd.sandbox.limits import Limits

    seen = []

    def root(messages):
        seen.append(messages)
        return repl("while True:\n    pass") if turn_of(messages) == 0 else repl("FINAL('done')")

    reg = scripted_registry(root=root)
    box = create_sandbox("subprocess", limits=Limits(wall_s=1.0))
    cfg = RunConfig(root_model="root", budget=Budget(max_iterations=3, cell_timeout_s=120))
    try:
        result = await run_task("q", "ctx", cfg, get_model=reg.get, sandbox=box)
    finally:
        await box.close()
        await reg.aclose()
    assert "timed out after 1 s" in last_user(seen[1])
    assert result.status == "completed"


async def test_repl_code_cannot_switch_to_a_hosted_shorthand_the_run_was_not_configured_with(
    rlmd_home,
):
    """Found by the hostile fresh-user test: ``llm_query('hi', model='openai:gpt-4.1-mini')``
    reached a hosted provider the run was never configured with."""
    from helpers.http_server import FakeServer, openai_reply

    server = FakeServer(lambda request: openai_reply("hosted answer", model="m"))
    url = f"http://127.0.0.1:{server.port}/v1"
    (rlmd_home / "config.toml").write_text(
        f'[providers.openai]\nbase_url = "{url}"\nmax_retries = 0\n'
        f'[providers.anthropic]\nbase_url = "{url}"\nmax_retries = 0\n'
        f'[models.hosted]\nprovider = "openai"\nmodel = "m"\nbase_url = "{url}"\n'
    )
    code = (
        "for name in ('openai:gpt-4.1-mini', 'anthropic:claude-opus-4-1'):\n"
        "    try:\n"
        "        print('GOT', llm_query('hi', model=name))\n"
        "    except Exception as e:\n"
        "        print('ERR', e)\n"
        "print('CONFIGURED', llm_query('hi', model='hosted'))\n"
    )
    seen = []

    def root(messages):
        seen.append(messages)
        return repl(code) if turn_of(messages) == 0 else repl("FINAL('done')")

    reg = scripted_registry(root=root)
    cfg = RunConfig(root_model="root", budget=Budget(max_iterations=3))
    try:
        await run_task("q", "ctx", cfg, get_model=reg.get)
    finally:
        await reg.aclose()
        server.close()
    feedback = last_user(seen[1])
    assert feedback.count("is not allowed from the REPL") == 2, feedback
    assert "'openai:' shorthands reach a provider" in feedback and "GOT" not in feedback
    assert "CONFIGURED hosted answer" in feedback  # the user's configured name still works
    assert [r["body"]["model"] for r in server.requests] == ["m"]


SPAWN = (
    "import threading\n"
    "out = []\n"
    "def ask(i):\n"
    "    try:\n"
    "        out.append(FN(f'part {i}'))\n"
    "    except Exception as e:\n"
    "        out.append('ERR ' + str(e))\n"
    "ts = [threading.Thread(target=ask, args=(i,)) for i in range(12)]\n"
    "for t in ts: t.start()\n"
    "for t in ts: t.join()\n"
    "print(len(out), sorted(set(out)))\n"
)


@pytest.mark.parametrize("fn", ["rlm_query", "llm_query"])
async def test_threads_of_a_cell_get_no_more_subcalls_at_once_than_a_batch(fn):
    """Review14: twelve threads of one cell, each calling ``rlm_query``, had twelve child
    runs going at once (each with a REPL of its own: a kernel process per child, outside
    every limit of the cell's sandbox), and twelve ``llm_query`` threads twelve model calls;
    ``max_concurrent_subcalls`` (4) bounded only a batch. It now bounds a run's sub-calls
    and child runs however they are started; the rest wait their turn and all answer."""
    live = {"now": 0, "max": 0}

    async def sub(messages):
        live["now"] += 1
        live["max"] = max(live["max"], live["now"])
        try:
            await asyncio.sleep(0.2)
        finally:
            live["now"] -= 1
        return repl("FINAL('child done')") if fn == "rlm_query" else "sub done"

    seen = []

    def root(messages):
        seen.append(messages)
        return repl(SPAWN.replace("FN", fn)) if turn_of(messages) == 0 else repl("FINAL('done')")

    reg = scripted_registry(root=root, sub=sub)
    cfg = RunConfig(
        root_model="root",
        sub_model="sub",
        sandbox="inprocess",
        budget=Budget(max_iterations=3, max_depth=2),
    )
    try:
        result = await run_task("q", "ctx", cfg, get_model=reg.get)
    finally:
        await reg.aclose()
    assert result.status == "completed", result.error
    assert live["max"] == cfg.max_concurrent_subcalls == 4
    want = "child done" if fn == "rlm_query" else "sub done"
    assert f"12 ['{want}']" in last_user(seen[1])
