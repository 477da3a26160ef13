"""The configuration (rlmd.config): user and project files layered, their errors, and what a
project's own file may set (tighten the sandbox and budgets, never loosen them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import rlmd

from rlmd import config
from rlmd.sandbox import DEFAULT_BACKEND


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
    ],
)
def test_project_config_cannot_loosen_the_sandbox(rlmd_home, tmp_path, toml, needle):
    project = write_project(tmp_path, toml)
    with pytest.raises(ValueError) as err:
        config.load(project)
    assert needle in str(err.value) and str(project / ".rlmd.toml") in str(err.value)
    # the same table is the user's to set
    (rlmd_home / "config.toml").write_text(toml)
    assert config.load(None).sources == [rlmd_home / "config.toml"]


def test_project_config_may_tighten_the_sandbox(rlmd_home, tmp_path):
    project = write_project(
        tmp_path,
        '[run]\nsandbox = "subprocess"\n'
        'sandbox_options = {template = "base", limits = {memory_bytes = 268435456, wall_s = 5}}\n',
    )
    settings = config.load(project)
    assert settings.run["sandbox_options"]["limits"]["wall_s"] == 5


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
        config.load(project)
    assert "user config" in str(err.value)
    (rlmd_home / "config.toml").write_text(toml)  # the user may
    config.load(None)


def test_project_config_may_name_known_models(rlmd_home, tmp_path):
    project = write_project(tmp_path, '[run]\nmodel = "local:qwen2.5-coder-0.5b"\n')
    assert config.load(project).run["model"] == "local:qwen2.5-coder-0.5b"


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
        config.load(project)
    assert "may only lower budgets" in str(err.value)


def test_project_budget_is_measured_against_the_users_config(rlmd_home, tmp_path):
    (rlmd_home / "config.toml").write_text("[run]\nmax_iterations = 40\n")
    project = write_project(tmp_path, "[run]\nmax_iterations = 30\nmax_usd = 0.5\n")
    assert config.load(project).run["max_iterations"] == 30
    (project / ".rlmd.toml").write_text("[run]\nmax_iterations = 41\n")
    with pytest.raises(ValueError, match="above 40"):
        config.load(project)


# -- layering and errors (moved from test_models.py) ----------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_user_then_project_override(rlmd_home: Path, tmp_path: Path) -> None:
    write(
        rlmd_home / "config.toml",
        """
[models.fast]
provider = "openai"
model = "gpt-4.1-mini"
price_input = 0.4
price_output = 1.6
timeout_s = 30
[models.fast.sampling]
temperature = 0.5
top_p = 0.9

[models."qwen2.5-coder-1.5b"]
n_threads = 2

[models.mine]
provider = "scripted"
model = "scripts/s.json"

[run]
model = "fast"
max_depth = 2
""",
    )
    project = tmp_path / "proj"
    write(
        project / ".rlmd.toml",
        """
[models.fast]
timeout_s = 10
[models.fast.sampling]
temperature = 0

[models.small]
provider = "local"
model = "qwen2.5-coder-0.5b"

[run]
max_depth = 1
sub_model = "qwen2.5-coder-0.5b"

[sandbox]
require_isolation = true
""",
    )
    user_only = config.load().registry()
    assert user_only.spec("fast").base_url is None
    assert user_only.spec("qwen2.5-coder-1.5b").n_threads == 2

    settings = config.load(project)
    registry = settings.registry()
    fast = registry.spec("fast")
    assert fast.provider == "openai" and fast.model == "gpt-4.1-mini"
    assert fast.base_url is None
    assert (fast.price_input, fast.price_output, fast.timeout_s) == (0.4, 1.6, 10)
    assert fast.sampling == {"temperature": 0, "top_p": 0.9}
    assert registry.spec("mine").model == str(rlmd_home / "scripts" / "s.json")
    assert settings.run == {
        "model": "fast",
        "max_depth": 1,
        "sub_model": "qwen2.5-coder-0.5b",
    }
    assert settings.sections == {"sandbox": {"require_isolation": True}}
    assert settings.sources == [rlmd_home / "config.toml", project / ".rlmd.toml"]
    assert "small" in registry.names() and "small" not in user_only.names()


@pytest.mark.parametrize(
    "toml",
    [
        '[models.fast]\nbase_url = "http://127.0.0.1:9/v1"\n',
        '[models.x]\nprovider = "openai"\nmodel = "m"\napi_key_env = "OPENAI_API_KEY"\n',
        '[providers.openai]\nbase_url = "http://evil.invalid/v1"\n',
        '[models.x]\nprovider = "scripted"\nmodel = "evil.py:run"\n',
        "[models.fast]\nprice_input = 0.0\n",  # free, as far as max_usd could tell
        '[models.x]\nprovider = "openai"\nmodel = "o1-pro"\nprice_output = 0.001\n',
        "[providers.anthropic]\nprice_input = 0\n",
    ],
)
def test_project_config_cannot_steer_keys_or_load_code(
    rlmd_home: Path, tmp_path: Path, toml: str
) -> None:
    """A project's .rlmd.toml comes with the code being asked about: it must not choose where
    the user's API key goes, what a model costs (a USD budget counts by it), nor make rlmd
    import Python from the repository."""
    write(rlmd_home / "config.toml", '[models.fast]\nprovider = "openai"\nmodel = "gpt-4.1-mini"\n')
    project = tmp_path / "cloned"
    write(project / ".rlmd.toml", toml)
    with pytest.raises(ValueError, match="only be (set|defined) in the user config"):
        config.load(project)
    # the same lines are fine in the user's own config
    write(
        rlmd_home / "config.toml",
        toml.replace("[models.fast]", '[models.fast]\nprovider = "openai"'),
    )
    config.load(None)


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[models.x]\nprovider = "openai"\nmodle = "y"\n', "[models.x]: unknown key 'modle'"),
        (
            '[models.x]\nprovider = "openai"\ncontext_window = "big"\n',
            "[models.x].context_window: expected int",
        ),
        (
            '[models.x]\nprovider = "openai"\nprice_input = true\n',
            "[models.x].price_input: expected number",
        ),
        ('[models.x]\nprovider = "openai"\nn_threads = 0\n', "n_threads: must be >= 1"),
        ('[models.x]\nprovider = "openai"\nprice_output = nan\n', "must be a finite number"),
        ('[models.x]\nprovider = "openai"\nprice_input = -1\n', "price_input: must be >= 0"),
        ('[models.x]\nprovider = "gemini"\n', "'gemini' is not one of"),
        ('[models.x]\nmodel = "y"\n', "needs a 'provider' key"),
        ('[models.x]\nprovider = "openai"\nsampling = 1\n', "sampling: expected dict"),
        (
            '[models.x]\nprovider = "local"\noptions.repeat_guard = { copies = 1 }\n',
            "[models.x]: options.repeat_guard.copies must be an integer ≥ 2, not 1",
        ),
        (
            '[models.x]\nprovider = "local"\noptions.repeat_guard = "off"\n',
            "[models.x]: options.repeat_guard must be true, false or a table",
        ),
        (
            '[models.x]\nprovider = "openai"\n[models.x.sampling]\ntemperature = "hot"\n',
            "[models.x].sampling.temperature: must be a number >= 0, got 'hot'",
        ),
        (
            '[models.x]\nprovider = "openai"\n[models.x.sampling]\ntop_p = 1.5\n',
            "[models.x].sampling.top_p: must be a number in [0, 1], got 1.5",
        ),
        (
            '[models.x]\nprovider = "openai"\n[models.x.sampling]\nseed = 1.5\n',
            "[models.x].sampling.seed: must be a whole number, got 1.5",
        ),
        (
            '[models.x]\nprovider = "openai"\n[models.x.sampling]\ntemperature = true\n',
            "[models.x].sampling.temperature: must be a number >= 0, got True",
        ),
        (
            "[providers.openai]\n[providers.openai.sampling]\ntemperature = nan\n",
            "[providers.openai].sampling.temperature: must be a number >= 0, got nan",
        ),
        ("[cluster]\naddress = 5\n", "[cluster]: address must be a non-empty string"),
        ("[cluster]\nadress = 'auto'\n", "[cluster]: unknown key(s) ['adress']"),
        ("cluster = 1\n", "[cluster] must be a table"),
        ("[models\n", "invalid TOML"),
        ('models = "x"\n', "'models' must be a table"),
        ('[providers.openai]\nmodel = "x"\n', "[providers.openai]: unknown key 'model'"),
        ("run = 3\n", "'run' must be a table"),
    ],
)
def test_bad_config_names_the_file_and_key(rlmd_home: Path, toml: str, needle: str) -> None:
    path = write(rlmd_home / "config.toml", toml)
    with pytest.raises(ValueError) as info:
        config.load()
    assert str(path) in str(info.value)
    assert needle in str(info.value)


# -- settings + overrides ---------------------------------------------------------------------


def test_sampling_keys_rlmd_does_not_know_pass_as_is(rlmd_home: Path) -> None:
    write(
        rlmd_home / "config.toml",
        '[models.x]\nprovider = "openai"\n[models.x.sampling]\n'
        'temperature = 0.7\nseed = 3\ntop_k = 40\nlogit_bias = {"50256" = -100}\n',
    )
    sampling = config.load().models["x"]["sampling"]
    assert sampling == {"temperature": 0.7, "seed": 3, "top_k": 40, "logit_bias": {"50256": -100}}


def test_a_project_sampling_table_is_checked_too(rlmd_home: Path, tmp_path: Path) -> None:
    project = write_project(
        tmp_path, '[models."qwen2.5-coder-0.5b".sampling]\ntemperature = "hot"\n'
    )
    with pytest.raises(ValueError) as info:
        config.load(project)
    assert str(project / ".rlmd.toml") in str(info.value)
    assert "sampling.temperature: must be a number >= 0, got 'hot'" in str(info.value)


@pytest.mark.parametrize("key", ["model", "n", "extra_body", "extra_headers", "stream"])
def test_a_request_field_is_not_a_sampling_key(rlmd_home: Path, key: str) -> None:
    """Review22: a ``sampling`` table's keys were put into the request as they were, so
    ``model = "..."`` sent the calls to another model than the one priced, ``n = 7`` had the
    server write (and bill) seven replies for the one read, ``extra_body`` replaced the
    messages and ``extra_headers`` added headers."""
    value = {"model": '"o1-pro"', "n": "7", "stream": "true"}.get(key, '{ "x" = "1" }')
    path = write(
        rlmd_home / "config.toml",
        f'[models.x]\nprovider = "openai"\n[models.x.sampling]\n{key} = {value}\n',
    )
    with pytest.raises(ValueError) as info:
        config.load()
    assert str(path) in str(info.value)
    assert f"[models.x].sampling.{key}: rlmd sets '{key}' in each request" in str(info.value)


def test_a_project_may_set_only_the_sampling_numbers(rlmd_home: Path, tmp_path: Path) -> None:
    """Review22: a project's ``.rlmd.toml`` (it comes with the code asked about) could set
    any other sampling key for your models, and it went to the provider as it was:
    ``store = true`` (your prompts kept on OpenAI's side), ``service_tier = "priority"``
    (calls billed higher than the price max_usd counts)."""
    write(rlmd_home / "config.toml", '[models.x]\nprovider = "openai"\nprice_input = 1\n')
    project = write_project(tmp_path, "[models.x.sampling]\ntemperature = 0.2\nstore = true\n")
    with pytest.raises(ValueError) as info:
        config.load(project)
    assert str(project / ".rlmd.toml") in str(info.value)
    assert "[models.x].sampling.store: may only be set in the user config" in str(info.value)
    (project / ".rlmd.toml").write_text("[models.x.sampling]\ntemperature = 0.2\ntop_k = 40\n")
    assert config.load(project).models["x"]["sampling"] == {"temperature": 0.2, "top_k": 40}


def test_run_config_is_the_run_table_under_the_overrides(rlmd_home: Path) -> None:
    write(
        rlmd_home / "config.toml",
        '[run]\nmodel = "fast"\nsandbox = "container"\nmax_depth = 2\noutput_cap = 500\n'
        'models_by_depth = {"2" = "tiny"}\n',
    )
    settings = config.load()
    run = config.build_run_config(
        settings, sub_model="sub", budget={"max_depth": 3, "max_usd": None}, workspace=rlmd_home
    )
    assert (run.root_model, run.sub_model, run.sandbox) == ("fast", "sub", "container")
    assert (run.budget.max_depth, run.budget.max_usd, run.output_cap) == (3, None, 500)
    assert run.models_by_depth == {2: "tiny"} and run.workspace == str(rlmd_home)
    assert config.build_run_config(settings, model="m", sandbox="inprocess").sandbox == "inprocess"
    plain = config.build_run_config(config.Settings())
    assert (plain.root_model, plain.sandbox) == (config.DEFAULT_MODEL, DEFAULT_BACKEND)
    with pytest.raises(ValueError, match=r"unknown run options: \['colour'\]"):
        config.build_run_config(settings, colour=1)
    with pytest.raises(ValueError, match=r"unknown budget keys: \['max_fun'\]"):
        config.build_run_config(settings, budget={"max_fun": 1})


def test_workspace_settings_fall_back_to_the_run_table(rlmd_home: Path, tmp_path: Path) -> None:
    write(rlmd_home / "config.toml", '[run]\nsandbox = "container"\n')
    project = tmp_path / "proj"
    write(project / ".rlmd.toml", "[workspace]\nidle_timeout_s = 5\nmax_var_bytes = 1024\n")
    ws = config.workspace_settings(config.load(project), project, idle_timeout_s=600.0)
    assert (ws.sandbox, ws.idle_timeout_s, ws.max_var_bytes) == ("container", 5.0, 1024)
    default = config.workspace_settings(config.Settings(), project, idle_timeout_s=None)
    assert (default.sandbox, default.idle_timeout_s) == (DEFAULT_BACKEND, None)
    write(project / ".rlmd.toml", "[workspace]\nidle_timeout_s = 0\n")
    with pytest.raises(ValueError, match=r"\[workspace\] idle_timeout_s must be a number > 0"):
        config.workspace_settings(config.load(project), project, idle_timeout_s=None)


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        # the project's own script replaced the default model ("The answer is evil.py")
        ('[models."qwen2.5-coder-1.5b"]\nprovider = "scripted"\nmodel = "evil.json"\n', "scripted"),
        (
            '[models.x]\nprovider = "scripted"\nmodel = "evil.json"\n[run]\nmodel = "x"\n',
            "scripted",
        ),
        # llama.cpp was made to load any file of the machine
        ('[models."qwen2.5-coder-0.5b"]\nmodel = "../../../etc/passwd"\n', "local model file"),
        ('[models."qwen2.5-coder-0.5b"]\nmodel = "qwen2.5-coder-1.5b"\n', "redefines"),
        ('[models."qwen2.5-coder-0.5b"]\nprovider = "openai"\n', "redefines"),
        ('[models."qwen2.5-coder-0.5b"]\nmax_output_tokens = 5000000\n', "may only lower"),
        ('[models."qwen2.5-coder-0.5b"]\nn_threads = 16\n', "may only lower"),
        ('[models."qwen2.5-coder-0.5b"]\ntimeout_s = 1e9\n', "may only lower"),
        ('[models."qwen2.5-coder-0.5b"]\nmax_retries = 1000\n', "may only lower"),
        ("[providers.openai]\nmax_retries = 1000\n", "may only lower"),
    ],
)
def test_project_models_cannot_swap_in_their_own_script_file_or_higher_limits(
    rlmd_home, tmp_path, toml, needle
):
    project = write_project(tmp_path, toml)
    (project / "evil.json").write_text(json.dumps({"responses": ["FINAL('evil.py')"]}))
    with pytest.raises(ValueError) as err:
        config.load(project)
    message = str(err.value)
    assert needle in message and str(project / ".rlmd.toml") in message and "user config" in message


def test_project_models_may_tighten_a_configured_model(rlmd_home, tmp_path):
    project = write_project(
        tmp_path,
        '[models."qwen2.5-coder-0.5b"]\nmax_output_tokens = 256\nn_threads = 1\n'
        '[models."qwen2.5-coder-0.5b".sampling]\ntemperature = 0\n'
        '[models.small]\nprovider = "local"\nmodel = "qwen2.5-coder-0.5b"\n',
    )
    models = config.load(project).models
    assert models["qwen2.5-coder-0.5b"]["max_output_tokens"] == 256
    assert models["small"]["model"] == "qwen2.5-coder-0.5b"


def test_rlmd_run_does_not_answer_with_the_projects_own_script(rlmd_home, tmp_path):
    project = write_project(
        tmp_path, '[models."qwen2.5-coder-1.5b"]\nprovider = "scripted"\nmodel = "evil.json"\n'
    )
    (project / "evil.json").write_text(
        json.dumps({"responses": ["```repl\nFINAL('The answer is evil.py')\n```"]})
    )
    proc = rlmd("run", "where is Foo", "--context", str(project), home=rlmd_home)
    assert proc.returncode != 0 and "evil.py" not in proc.stdout
    assert "scripted" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "toml",
    [
        '[run]\nmodel = "anthropic:claude-opus-4-1"\n',
        '[run]\nsub_model = "openai:o3"\n',
        '[run]\nmodels_by_depth = { 1 = "openai:gpt-4.1" }\n',
        '[models.big]\nprovider = "openai"\nmodel = "o3"\n[run]\nmodel = "big"\n',
        '[run]\nmodel = "no-such-model"\n',
    ],
)
def test_project_run_cannot_switch_to_a_paid_hosted_model(rlmd_home, tmp_path, toml):
    """A cloned repository must not send your code to a provider at your expense."""
    project = write_project(tmp_path, toml)
    with pytest.raises(ValueError) as err:
        config.load(project)
    message = str(err.value)
    assert "may only name configured models" in message and "user config" in message
    assert str(project / ".rlmd.toml") in message
    (rlmd_home / "config.toml").write_text(toml)  # the user may
    config.load(None)


def test_project_run_may_name_the_users_and_local_models(rlmd_home, tmp_path):
    (rlmd_home / "config.toml").write_text('[models.fast]\nprovider = "openai"\nmodel = "m"\n')
    project = write_project(
        tmp_path,
        '[models.small]\nprovider = "local"\nmodel = "qwen2.5-coder-0.5b"\n'
        '[run]\nmodel = "fast"\nsub_model = "small"\n'
        'models_by_depth = { 2 = "qwen2.5-coder-1.5b" }\n',
    )
    assert config.load(project).run["sub_model"] == "small"


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[workspace]\nidle_timeout_s = 1e15\n", "is above 600.0 (your config or the default)"),
        ("[workspace]\nmax_var_bytes = 99999999999999\n", "may only lower it"),
        ("[workspace]\nidel_timeout_s = 5\n", "unknown key 'idel_timeout_s'"),
        ("[workspace]\nidle_timeout_s = nan\n", "must be a number > 0"),
        ("[run]\nmax_iterations = nan\n", "max_iterations = nan must be a number"),
        ("[run]\ncell_timeout_s = -1\n", "cell_timeout_s must be a number of seconds > 0"),
        # 0 interrupted every cell as it started (rlmd run --cell-timeout 0 was refused)
        ("[run]\ncell_timeout_s = 0\n", "cell_timeout_s must be a number of seconds > 0"),
        ('[run]\nmax_depth = "2"\n', "max_depth = '2' must be a number"),
        # over the daemon a 0 ran the root loop normally; the CLI refused it
        ("[run]\nmax_depth = 0\n", "max_depth must be >= 1"),
        ("[run]\nmax_subcalls = 2.5\n", "max_subcalls must be a whole number, got 2.5"),
    ],
)
def test_project_workspace_and_run_numbers_cannot_be_raised_or_malformed(
    rlmd_home, tmp_path, toml, needle
):
    """Found by the hostile fresh-user test: a sandbox kept warm for 3e7 years, unknown keys
    passing silently, "nan is above 10" and a -1 timeout's error without the file."""
    project = write_project(tmp_path, toml)
    with pytest.raises(ValueError) as err:
        config.load(project)
    assert needle in str(err.value) and str(project / ".rlmd.toml") in str(err.value)


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[workspace]\nidel_timeout_s = 5\n", "unknown key 'idel_timeout_s'"),
        ("[run]\nmax_iterations = nan\n", "max_iterations must be a number"),
        ("[run]\ncell_timeout_s = -1\n", "cell_timeout_s must be a number of seconds > 0"),
        # 0 interrupted every cell as it started (rlmd run --cell-timeout 0 was refused)
        ("[run]\ncell_timeout_s = 0\n", "cell_timeout_s must be a number of seconds > 0"),
    ],
)
def test_user_config_errors_name_the_file_and_key(rlmd_home, toml, needle):
    (rlmd_home / "config.toml").write_text(toml)
    with pytest.raises(ValueError) as err:
        config.load(None)
    assert needle in str(err.value) and str(rlmd_home / "config.toml") in str(err.value)


def test_project_may_lower_the_workspace_idle_time(rlmd_home, tmp_path):
    (rlmd_home / "config.toml").write_text("[workspace]\nidle_timeout_s = 3600\n")
    project = write_project(tmp_path, "[workspace]\nidle_timeout_s = 1200\n")
    ws = config.workspace_settings(config.load(project), project, idle_timeout_s=600.0)
    assert ws.idle_timeout_s == 1200


@pytest.mark.parametrize("key", ["resample_repeats", "output_cap", "max_concurrent_subcalls"])
def test_a_count_option_that_is_not_a_whole_number_is_refused(rlmd_home, key):
    """``range(1, 1.5 + 1)`` failed the run at its first repeated cell with a TypeError."""
    (rlmd_home / "config.toml").write_text(f"[run]\n{key} = 1.5\n")
    with pytest.raises(ValueError, match=f"{key} must be a whole number"):
        config.load(None)


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        # a typo in a setting that guards the sandbox was accepted and did nothing
        ("[sandbox]\nrequire_isolaton = true\n", "[sandbox]: unknown key 'require_isolaton'"),
        ("[daemon]\nallow_inprocces = true\n", "[daemon]: unknown key 'allow_inprocces'"),
        ("[sandbox]\nrequire_isolation = 1\n", "[sandbox].require_isolation: expected bool"),
        ("[sandboxes]\nx = 1\n", "unknown table [sandboxes]"),
        ("[run]\nmax_iteratons = 3\n", "[run]: unknown key 'max_iteratons'"),
        # RunConfig's own argument names: a TypeError traceback ("multiple values")
        ('[run]\nroot_model = "x"\n', "[run]: unknown key 'root_model'"),
        ("[run]\nbudget = 3\n", "[run]: unknown key 'budget'"),
        ('[run]\nworkspace = "/etc"\n', "[run]: unknown key 'workspace'"),
        # a value of the wrong type failed the run with a TypeError
        ("[run]\ntools = 5\n", "[run]: tools must be a table"),
        ('[run]\nsandbox_options = "x"\n', "[run]: sandbox_options must be a table"),
        ('[run]\nverify_answer = "no"\n', "[run]: verify_answer must be true or false"),
        ("[run]\nsystem_prompt = 3\n", "[run]: system_prompt must be a string"),
    ],
)
def test_unknown_tables_keys_and_wrong_types_name_the_file(rlmd_home, tmp_path, toml, needle):
    """The README: unknown keys are errors naming the file. Tables other than the models,
    providers, [run] and [workspace] were not checked at all."""
    path = write(rlmd_home / "config.toml", toml)
    with pytest.raises(ValueError) as err:
        config.load(None)
    assert needle in str(err.value) and str(path) in str(err.value)
    project = write_project(tmp_path, toml)  # a project's file too ([daemon]: not its own)
    (rlmd_home / "config.toml").unlink()
    with pytest.raises(ValueError) as err:
        config.load(project)
    assert str(project / ".rlmd.toml") in str(err.value)


def test_every_documented_table_and_key_is_still_accepted(rlmd_home):
    write(
        rlmd_home / "config.toml",
        "[run]\nmodel = 'qwen2.5-coder-0.5b'\nsub_model = 'qwen2.5-coder-0.5b'\n"
        "models_by_depth = {1 = 'qwen2.5-coder-0.5b'}\nsandbox = 'subprocess'\n"
        "max_iterations = 3\nverify_answer = false\nsystem_prompt = 'x'\n"
        "tools = {limit = 3}\ntool_docs = {limit = 'a number'}\ncompaction_threshold = 0.5\n"
        "sandbox_options = {limits = {memory_bytes = 1000000000}}\n"
        "[sandbox]\nrequire_isolation = true\n[daemon]\nallow_inprocess = false\n"
        "[cluster]\naddress = 'auto'\n[workspace]\nidle_timeout_s = 5\n",
    )
    settings = config.load(None)
    run = config.build_run_config(settings)
    assert run.budget.max_iterations == 3 and run.tools == {"limit": 3}
    assert run.models_by_depth == {1: "qwen2.5-coder-0.5b"} and not run.verify_answer
    assert config.require_isolation(settings, default=False)


def test_a_whole_float_count_in_the_user_config_runs(rlmd_home: Path, tmp_path: Path) -> None:
    """``max_iterations = 3.0`` passed the config check, then the run failed at its first
    turn ("TypeError: 'float' object cannot be interpreted as an integer"): a whole float
    count is the int it says."""
    from rlmd.engine.budget import Budget

    assert Budget(max_iterations=3.0, max_subcalls=2.0).to_dict()["max_iterations"] == 3
    assert type(Budget(max_iterations=3.0).max_iterations) is int
    write(rlmd_home / "config.toml", "[run]\nmax_iterations = 3.0\nmax_subcalls = 4.0\n")
    script = write(tmp_path / "s.json", '["```repl\\nprint(6*7)\\n```", "FINAL(42)"]')
    project = write_project(tmp_path, "")
    done = rlmd(
        "run", "what?", "--context", str(project), "--model", f"scripted:{script}",
        "--quiet", home=rlmd_home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"


def test_a_config_file_that_is_not_utf8_names_the_file_and_a_bom_is_accepted(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review14: a user or project config with a byte that is not UTF-8 stopped rlmd with
    ``'utf-8' codec can't decode byte 0xff in position 15`` (which file?), and one saved
    with a byte-order mark (Windows Notepad) was 'invalid TOML (at line 1, column 1)'."""
    user = rlmd_home / "config.toml"
    user.write_bytes(b'[run]\nmodel = "\xff"\n')
    with pytest.raises(ValueError, match=r"config\.toml: not UTF-8 text \(.* at byte 15\)"):
        config.load()
    user.write_bytes(b"\xef\xbb\xbf[run]\nmax_iterations = 3\n")
    assert config.load().run["max_iterations"] == 3
    project = tmp_path / "proj"
    project.mkdir()
    (project / ".rlmd.toml").write_bytes(b"\xff[run]\n")
    with pytest.raises(ValueError, match=r"\.rlmd\.toml: not UTF-8 text"):
        config.load(project)
    (project / ".rlmd.toml").write_bytes(b"\xef\xbb\xbf[run]\nmax_iterations = 2\n")
    assert config.load(project).run["max_iterations"] == 2


def test_a_config_nested_too_deeply_is_refused_naming_the_file(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review19: a project's ``.rlmd.toml`` (it comes with the code asked about) or a user
    config holding ``a = [[[[...`` a few hundred levels deep ended ``rlmd run``, ``rlmd
    models`` and the daemon's task start in tomllib's ``RecursionError`` traceback."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    (project / ".rlmd.toml").write_text("a = " + "[" * 2000 + "]" * 2000 + "\n")
    with pytest.raises(ValueError, match=r"\.rlmd\.toml: invalid TOML: .* nested too deeply"):
        config.load(project)
    script = tmp_path / "s.json"
    script.write_text('["```repl\\nFINAL(1)\\n```"]')
    proc = rlmd("run", "q", "--context", str(project), "--model", f"scripted:{script}",
                home=rlmd_home)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert ".rlmd.toml: invalid TOML" in proc.stderr and "Traceback" not in proc.stderr
    (rlmd_home / "config.toml").write_text("a = " + "{b = " * 2000 + "1" + "}" * 2000 + "\n")
    proc = rlmd("models", home=rlmd_home)
    assert proc.returncode == 2 and "config.toml: invalid TOML" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_config_file_over_a_mib_is_refused_without_reading_it(
    rlmd_home: Path, tmp_path: Path
) -> None:
    """Review19: a project's ``.rlmd.toml`` of 3 GB (a few MB in git: it compresses), or one
    symlinked to a large file, was read whole: ``rlmd run`` took 52 s and 6.3 GB before
    saying "invalid TOML". Over 1 MiB is refused by size, valid TOML or not."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    comment = "# " + "x" * 1021 + "\n"  # valid TOML, 1 KiB a line
    (project / ".rlmd.toml").write_text("[run]\nmax_iterations = 2\n" + comment * 1024)
    with pytest.raises(ValueError, match=r"\.rlmd\.toml: larger than 1 MiB"):
        config.load(project)
    huge = tmp_path / "huge"
    with huge.open("wb") as fh:
        fh.truncate(3 << 30)  # sparse: takes no disk
    (project / ".rlmd.toml").unlink()
    (project / ".rlmd.toml").symlink_to(huge)
    script = tmp_path / "s.json"
    script.write_text('["```repl\\nFINAL(1)\\n```"]')
    proc = rlmd("run", "q", "--context", str(project), "--model", f"scripted:{script}",
                home=rlmd_home)  # fmt: skip
    assert proc.returncode == 2 and ".rlmd.toml: larger than 1 MiB" in proc.stderr, proc.stderr
    (rlmd_home / "config.toml").write_text(comment * 1025)
    with pytest.raises(ValueError, match=r"config\.toml: larger than 1 MiB"):
        config.load()


def test_a_user_config_that_is_a_folder_is_refused_not_passed_over(rlmd_home: Path) -> None:
    """Review14: ``config.toml`` made a folder (``mkdir -p`` of the wrong path) was passed
    over without a word: every setting in it silently at its default."""
    (rlmd_home / "config.toml").mkdir()
    with pytest.raises(ValueError, match=r"config\.toml: not a regular file"):
        config.load()
    proc = rlmd("models", home=rlmd_home)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "base_url, why",
    [
        ("not a url", "is not an http:// or https:// URL"),
        ("file:///etc/passwd", "is not an http:// or https:// URL"),
        ("localhost:8000/v1", "is not an http:// or https:// URL"),
        ("http://[::1/v1", "has a host or port that cannot be read (Invalid IPv6 URL)"),
        ("http://localhost:99999/v1", "has a host or port that cannot be read (Port out of"),
        ("http://localhost:8000/v1 ", "holds a blank or a control character"),
    ],
)
def test_a_base_url_that_is_no_http_url_names_the_model(rlmd_home: Path, base_url, why) -> None:
    """A new user's walk (review16): ``base_url = "http://[::1"`` was listed as usable by
    ``rlmd models`` and a run with the model failed at its first call (``InvalidURL``);
    ``file:///etc/passwd`` failed only after four attempts ("Connection error")."""
    for table, keys in (
        ("models.m", 'provider = "openai"\nmodel = "x"\n'),
        ("providers.openai", ""),
    ):
        write(rlmd_home / "config.toml", f'[{table}]\n{keys}base_url = "{base_url}"\n')
        with pytest.raises(ValueError) as info:
            config.load()
        assert f"config.toml: [{table}].base_url: {base_url!r} {why}" in str(info.value)
    write(rlmd_home / "config.toml", '[models.m]\nprovider = "openai"\nmodel = "x"\n'
          'base_url = "http://user:pw@127.0.0.1:8000/v1"\n')  # fmt: skip
    assert config.load().models["m"]["base_url"] == "http://user:pw@127.0.0.1:8000/v1"


@pytest.mark.parametrize("name", ["", " ", "line\\nbreak", "tab\\there"])
def test_a_model_name_no_command_line_could_give_is_refused(rlmd_home: Path, name) -> None:
    """``[models.""]`` was listed by ``rlmd models`` as a row with no name (and ``--model ""``
    is refused); a name with a newline drew two rows."""
    write(rlmd_home / "config.toml", f'[models."{name}"]\nprovider = "openai"\nmodel = "x"\n')
    with pytest.raises(ValueError, match=r"a model's name must be printable text"):
        config.load()


def _toml_blocks(doc: str) -> list[str]:
    import re

    text = (Path(__file__).parent.parent / doc).read_text(encoding="utf-8")
    return re.findall(r"^```toml\n(.*?)^```", text, re.M | re.S)


@pytest.mark.parametrize(
    ("doc", "where"),
    [("README.md", "user"), ("docs/protocol.md", "project"), ("docs/cluster.md", "user")],
)
def test_the_docs_toml_examples_load_where_they_say(rlmd_home, tmp_path, doc, where):
    """Review17: docs/protocol.md's project config example (``.rlmd.toml``) set
    ``[workspace.sandbox_options] timeout_s``, which rlmd refuses in a project's file; a
    user who copied it got "a project config may not set sandbox_options.timeout_s"."""
    blocks = _toml_blocks(doc)
    assert blocks, doc
    for block in blocks:
        if where == "user":
            write(rlmd_home / "config.toml", block)
            config.load(None)
        else:
            config.load(write_project(tmp_path, block))
