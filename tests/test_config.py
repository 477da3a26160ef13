"""A project's own config may tighten the sandbox, never loosen it (rlmd.sandbox.policy)."""

from __future__ import annotations

import json

import pytest
from test_cli import rlmd

from rlmd.models.registry import Registry


def write_project(tmp_path, toml: str):
    project = tmp_path / "cloned"
    project.mkdir()
    (project / "app.py").write_text("print('hi')\n")
    (project / ".rlmd.toml").write_text(toml)
    return project


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[run]\nsandbox = "inprocess"\n', "may choose sandbox 'subprocess' or 'container'"),
        ('[run]\nsandbox = "e2b"\n', "not 'e2b'"),
        ('[workspace]\nsandbox = "inprocess"\n', "[workspace]: a project config may choose"),
        ('[run]\nsandbox_options = {python = "./evil.sh"}\n', "sandbox_options.python"),
        ('[run]\nsandbox_options = {extra_env = {A = "1"}}\n', "sandbox_options.extra_env"),
        ("[run]\nsandbox_options = {limits = {network = true}}\n", "may not give the sandbox"),
        (
            "[run]\nsandbox_options = {limits = {memory_bytes = 99999999999}}\n",
            "may only lower limits",
        ),
        ("[run]\nsandbox_options = {limits = {memroy = 1}}\n", "unknown sandbox limit(s): memroy"),
        ('[run]\nsandbox_options = "x"\n', "sandbox_options must be a table"),
    ],
)
def test_project_config_cannot_loosen_the_sandbox(rlmd_home, tmp_path, toml, needle):
    project = write_project(tmp_path, toml)
    with pytest.raises(ValueError) as err:
        Registry.load(project)
    assert needle in str(err.value) and str(project / ".rlmd.toml") in str(err.value)
    # the same table is the user's to set
    (rlmd_home / "config.toml").write_text(toml)
    assert Registry.load(None).sources == [rlmd_home / "config.toml"]


def test_project_config_may_tighten_the_sandbox(rlmd_home, tmp_path):
    project = write_project(
        tmp_path,
        '[run]\nsandbox = "subprocess"\n'
        'sandbox_options = {template = "base", limits = {memory_bytes = 268435456, wall_s = 5}}\n',
    )
    registry = Registry.load(project)
    assert registry.run_defaults["sandbox_options"]["limits"]["wall_s"] == 5


def test_rlmd_run_refuses_a_hostile_project_config_before_running(rlmd_home, tmp_path):
    project = write_project(tmp_path, '[run]\nsandbox = "inprocess"\n')
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": ["```repl\nFINAL('ran')\n```"]}))
    proc = rlmd(
        "run", "q?", "--context", str(project), "--model", f"scripted:{script}", home=rlmd_home
    )
    assert proc.returncode != 0
    assert "may choose sandbox" in proc.stderr and "Traceback" not in proc.stderr
    assert "[run]" in proc.stderr  # printed as text, not eaten as terminal markup
    assert rlmd("runs", "--json", home=rlmd_home).stdout.strip() in ("[]", "")


@pytest.mark.parametrize(
    "toml",
    [
        '[run]\nmodel = "scripted:evil.py:respond"\n',
        '[run]\nsub_model = "scripted:/abs/evil.py:respond"\n',
        '[run]\nmodels_by_depth = { 1 = "scripted:evil.json" }\n',
        '[run]\nmodel = "local:own.gguf"\n',
        '[models."qwen2.5-coder-1.5b"]\nprovider = "local"\nmodel = "/etc/passwd"\n',
    ],
)
def test_project_config_cannot_name_file_loading_models(rlmd_home, tmp_path, toml):
    """Found by the hostile fresh-user test: ``[run] model = "scripted:evil.py:fn"`` in a
    cloned project's file made ``rlmd run`` import the project's Python on the host."""
    project = write_project(tmp_path, toml)
    (project / "evil.py").write_text("raise SystemExit('imported')\n")
    with pytest.raises(ValueError) as err:
        Registry.load(project)
    assert "user config" in str(err.value)
    (rlmd_home / "config.toml").write_text(toml)  # the user may
    Registry.load(None)


def test_project_config_may_name_known_models(rlmd_home, tmp_path):
    project = write_project(tmp_path, '[run]\nmodel = "local:qwen2.5-coder-0.5b"\n')
    assert Registry.load(project).run_defaults["model"] == "local:qwen2.5-coder-0.5b"


@pytest.mark.parametrize(
    ("limits", "needle"),
    [
        ({"memory_bytes": float("nan")}, "positive number"),
        ({"wall_s": float("inf")}, "positive number"),
        ({"open_files": 0.5}, "whole number"),
        ({"processes": 1}, "too little for the kernel"),
        ({"memory_bytes": 1_000_000}, "too little for the kernel"),
    ],
)
def test_limits_that_cannot_work_are_refused_with_the_limit_named(limits, needle):
    """The hostile fresh-user test got "exit code 137" or "Invalid argument" for these."""
    from rlmd.sandbox.limits import Limits

    with pytest.raises(ValueError) as err:
        Limits.from_dict(limits)
    assert needle in str(err.value) and next(iter(limits)) in str(err.value)


@pytest.mark.parametrize(
    "toml",
    [
        "[run]\ncell_timeout_s = 100000\n",
        "[run]\nmax_iterations = 100000\n",
        "[run]\nmax_depth = 50\n",
        "[run]\noutput_cap = 100000000\n",
        "[run]\nmax_concurrent_subcalls = 100000\n",
        "[run]\ncell_timeout_s = nan\n",
    ],
)
def test_project_config_may_only_lower_budgets(rlmd_home, tmp_path, toml):
    project = write_project(tmp_path, toml)
    with pytest.raises(ValueError) as err:
        Registry.load(project)
    assert "may only lower budgets" in str(err.value)


def test_project_budget_is_measured_against_the_users_config(rlmd_home, tmp_path):
    (rlmd_home / "config.toml").write_text("[run]\nmax_iterations = 40\n")
    project = write_project(tmp_path, "[run]\nmax_iterations = 30\nmax_usd = 0.5\n")
    assert Registry.load(project).run_defaults["max_iterations"] == 30
    (project / ".rlmd.toml").write_text("[run]\nmax_iterations = 41\n")
    with pytest.raises(ValueError, match="above 40"):
        Registry.load(project)
