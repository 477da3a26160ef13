"""The engine facing untrusted model code: what it may name, and the sandbox limits it must
not override."""

from __future__ import annotations

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
