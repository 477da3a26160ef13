"""Code in the REPL names models for llm_query/rlm_query; it must not make the host load a
file it wrote (a ``scripted:evil.py:fn`` or ``local:/path`` shorthand)."""

from __future__ import annotations

from conftest import last_user, repl, scripted_registry, turn_of

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
