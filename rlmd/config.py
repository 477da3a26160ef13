"""Configuration: the user's and the project's TOML files, read once into :class:`Settings`;
every rule about what an untrusted project file may set; run and workspace settings built
from them plus overrides (command-line flags or protocol parameters).

Files, later layers override earlier ones key by key:

1. built-in entries for the known local models (``qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``);
2. the user config, ``paths.user_config_path()`` (``$RLMD_HOME/config.toml``): trusted, it
   may say anything;
3. the project config, ``.rlmd.toml`` or ``rlmd.toml`` in the project folder: untrusted.

A project's file arrives with the code being asked about, so it may make a run *safer or
cheaper*, never riskier. It may not choose where API keys are sent (``base_url``,
``api_key_env``), set a model's price (``price_input``/``price_output``: a low one would let
a USD budget through), load the project's files as code or models (any ``scripted`` model,
``local`` GGUF paths, ``scripted:``/``local:`` shorthands in ``[run]``), redefine the
provider or model of an entry the user or the built-ins define, run on any model but the
user's or the local ones (no hosted shorthand in ``[run]``), raise a budget, the output cap,
sub-call concurrency, a model's limits or the workspace's idle time above the user's config
or the default, or loosen the sandbox: no ``sandbox = "inprocess"`` (model code in the
daemon's own process), no ``sandbox_options.python`` (its own file as the kernel's
interpreter), no network, no limit above the default, no paid cloud VM. The checks are
:func:`check_project_models`, :func:`check_project_run`, :func:`check_project_workspace` and
:func:`check_project_sandbox`; each error names the file and the table and says to set the
value in the user config or on the command line instead.

Config format::

    [models.fast]                      # a model named "fast"
    provider = "openai"                # openai | anthropic | local | scripted
    model = "qwen2.5-coder"            # provider's id; default: the entry's name
    base_url = "http://127.0.0.1:8765/v1"
    api_key_env = "MY_SERVER_KEY"      # the variable's NAME; keys are never written in config
    context_window = 32768             # tokens
    max_output_tokens = 1024           # tokens per call
    price_input = 0.15                 # USD per 1M input tokens (default: unknown, which
    price_output = 0.60                # max_usd refuses; local and scripted models are free)
    n_threads = 1                      # local models only
    timeout_s = 120                    # seconds per request
    max_retries = 3
    [models.fast.sampling]             # passed to the provider as is (known keys checked)
    temperature = 0
    [models.fast.options]              # provider extras (local: n_ctx)
    n_ctx = 8192

    [providers.openai]                 # defaults for every "openai:MODEL" shorthand
    base_url = "http://127.0.0.1:8765/v1"

    [run]                              # run defaults (RunConfig and Budget fields)
    model = "fast"
    max_depth = 1

    [workspace]                        # daemon workspaces of this project
    sandbox = "container"
    idle_timeout_s = 300

    [daemon]                           # user config only
    allow_inprocess = true             # let socket clients open "inprocess" workspaces

    [cluster]                          # user config only: child runs on a Ray cluster
    engine = "ray"                     # (rlmd run/serve --cluster; docs/cluster.md)
    address = "auto"                   # "auto" | "HOST:PORT" | "ray://HOST:PORT"
    env = ["OPENAI_API_KEY"]           # variables passed to the workers, never to sandboxes

    [sandbox]
    require_isolation = true           # refuse to run the subprocess sandbox unisolated
                                       # (default: on in the daemon, off for rlmd run)

Relative paths in ``model`` of ``local`` and ``scripted`` entries are relative to the
config file's folder. Other top-level tables are kept in :attr:`Settings.sections`.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rlmd import paths
from rlmd.engine.budget import Budget
from rlmd.engine.config import RunConfig
from rlmd.models.base import ModelSpec
from rlmd.models.pull import KNOWN_LOCAL_MODELS
from rlmd.models.registry import (
    PROVIDERS,
    Registry,
    adapter_sub_model,
    builtin_entries,
    merge_entries,
)
from rlmd.models.repetition import guard_settings
from rlmd.sandbox import DEFAULT_BACKEND
from rlmd.sandbox.limits import Limits
from rlmd.urls import http_url_problem, shown_url
from rlmd.workspace.settings import WorkspaceSettings

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (1 MiB; a real one is a few KiB). A cloned project's 3 GB
``.rlmd.toml`` (a few MB in git: it compresses) or one symlinked to a large file held
``rlmd run`` for 52 s at 6.3 GB before "invalid TOML" (review19)."""
"""The root model when neither the command line nor a config names one: the local 1.5B
Qwen2.5-Coder GGUF (``rlmd models pull qwen2.5-coder-1.5b``)."""

BUDGET_KEYS = {f.name for f in fields(Budget)}
"""``[run]`` keys (and ``budget`` overrides) that are :class:`Budget` fields."""

FIELDS: dict[str, type | tuple[type, ...]] = {
    "provider": str,
    "model": str,
    "base_url": str,
    "api_key_env": str,
    "context_window": int,
    "max_output_tokens": int,
    "price_input": (int, float),
    "price_output": (int, float),
    "n_threads": int,
    "timeout_s": (int, float),
    "max_retries": int,
    "sampling": dict,
    "options": dict,
}
"""Keys allowed in a ``[models.NAME]`` table, with their TOML types."""

_MINIMUM: dict[str, int] = {
    "context_window": 1,
    "max_output_tokens": 1,
    "n_threads": 1,
    "max_retries": 0,
    "price_input": 0,
    "price_output": 0,
}


@dataclass
class Settings:
    """The configuration of one project folder (or of no project), as read from the files.

    Attributes:
        models: model entries by name (built-ins, then the files' ``[models.NAME]``), checked.
        providers: defaults for ``provider:model`` shorthands (``[providers.NAME]``), checked.
        run: the ``[run]`` table (project over user); checked against the project rules,
            interpreted by :func:`build_run_config`.
        sections: every other top-level table (``workspace``, ...), project over user.
        sources: the config files that were read, in order.
    """

    models: dict[str, dict[str, Any]] = field(default_factory=builtin_entries)
    providers: dict[str, dict[str, Any]] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, Any] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)

    def registry(self) -> Registry:
        """A new :class:`Registry` of these models (each call: its own model instances)."""
        return Registry(self.models, self.providers)


def load(project_dir: Path | None = None) -> Settings:
    """Built-ins, then the user config, then the project config of ``project_dir``.

    Raises:
        ValueError: a config file is not UTF-8 or not valid TOML, has an unknown key or a
            value of the wrong type, or (a project's file) sets what only the user may set;
            the user config is not a regular file; the message names the file and the key.
    """
    settings = Settings()
    user = paths.user_config_path()
    if user.is_file():
        read_file(settings, user)
    elif user.exists():  # a folder (or a FIFO, never opened) was passed over without a word
        raise ValueError(f"{user}: not a regular file; the user config is a TOML file")
    if project_dir is not None:
        project = paths.project_config_path(Path(project_dir))
        if project is not None:
            read_file(settings, project, trusted=False)
    return settings


def read_file(settings: Settings, path: Path, *, trusted: bool = True) -> None:
    """Apply one TOML config file on top of ``settings`` (in place).

    Args:
        trusted: ``False`` for a project's own config file (see the module docstring).

    Raises:
        ValueError: over :data:`MAX_CONFIG_BYTES` or not a regular file, not UTF-8,
            invalid TOML (also nested deeper than Python's recursion limit), unknown key
            or wrong type (naming ``path`` and the key), or, for an untrusted file, a key
            only the user config may set.
    """
    import tomllib  # here: most runs have no config file to read

    raw = _read_small(path)
    try:  # utf-8-sig: a byte-order mark (Windows editors write one) is not a TOML error
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:  # a = [[[[... (a cloned project's file): tomllib recurses per level
        raise ValueError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
    trusted_models = set(settings.models)  # built-ins and the user's, before this file
    models = data.pop("models", {})
    if not isinstance(models, dict):
        raise ValueError(f"{path}: 'models' must be a table of [models.NAME] tables")
    for name, table in models.items():
        if not name.strip() or not name.isprintable():  # no --model could name it
            raise ValueError(
                f"{path}: [models.{name!r}]: a model's name must be printable text, not empty "
                "or blank, without control characters"
            )
        entry = _check_fields(table, f"{path}: [models.{name}]", set(FIELDS))
        base = settings.models.get(name, {})
        if not trusted:
            check_project_models(entry, f"{path}: [models.{name}]", base, name)
        if "provider" not in entry and "provider" not in base:
            raise ValueError(f"{path}: [models.{name}] needs a 'provider' key")
        _fix_relative(entry, entry.get("provider", base.get("provider")), path.parent)
        settings.models[name] = merge_entries(base, entry)
    providers = data.pop("providers", {})
    if not isinstance(providers, dict):
        raise ValueError(f"{path}: 'providers' must be a table of [providers.NAME] tables")
    for provider, table in providers.items():
        if provider not in PROVIDERS:
            raise ValueError(f"{path}: [providers.{provider}]: unknown provider")
        allowed = set(FIELDS) - {"provider", "model"}
        entry = _check_fields(table, f"{path}: [providers.{provider}]", allowed)
        if not trusted:
            base = settings.providers.get(provider, {})
            check_project_models(entry, f"{path}: [providers.{provider}]", base)
        settings.providers[provider] = merge_entries(settings.providers.get(provider, {}), entry)
    run = data.pop("run", {})
    if not isinstance(run, dict):
        raise ValueError(f"{path}: 'run' must be a table")
    workspace = data.get("workspace")
    if workspace is not None:
        _check_workspace(workspace, f"{path}: [workspace]")
    if not trusted:
        for table in ("daemon", "cluster"):  # [cluster] would send the runs elsewhere
            if table in data:
                raise ValueError(f"{path}: a project config may not set [{table}]; {HINT}")
        box = data.get("sandbox")
        if isinstance(box, dict) and box.get("require_isolation") is False:
            raise ValueError(
                f"{path}: [sandbox] a project config may not turn require_isolation off; {HINT}"
            )
        allowed = trusted_models | {
            name for name, entry in settings.models.items() if entry.get("provider") == "local"
        }
        check_project_run(run, settings.run, f"{path}: [run]", allowed)
        if workspace is not None:
            user_workspace = settings.sections.get("workspace") or {}
            check_project_workspace(workspace, user_workspace, f"{path}: [workspace]")
    _check_run_keys(run, f"{path}: [run]")
    _check_run_numbers(run, f"{path}: [run]")
    _check_sections(data, path)
    settings.run.update(run)
    settings.sections.update(data)
    settings.sources.append(path)


def _read_small(path: Path) -> bytes:
    """The bytes of config file ``path``, read without blocking on a FIFO.

    Raises:
        ValueError: not a regular file, or over :data:`MAX_CONFIG_BYTES`.
        OSError: it cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO since is_file()
            raise ValueError(f"{path}: not a regular file; a config file is a TOML file")
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(
            f"{path}: larger than {MAX_CONFIG_BYTES >> 20} MiB; a config file is a small TOML file"
        )
    return data


# -- what a project's file may set --------------------------------------------------------

HINT = "set it in your user config or pass it on the command line instead"

UNTRUSTED_KEYS = ("base_url", "api_key_env")
"""Model keys a project config may not set: with them a cloned repository could send your
API key to a server of its choosing."""

PRICE_KEYS = ("price_input", "price_output")
"""Model keys a project config may not set: a price of 0 for a model you pay for would let
a USD budget (``max_usd``) through."""

PROJECT_BACKENDS = ("subprocess", "container")
"""Backends a project config may choose: both isolate model code on this machine."""

PROJECT_OPTIONS = ("limits", "template")
"""``sandbox_options`` keys a project config may set (limits only tighter than the defaults)."""

LOWER_ONLY_OPTIONS = ("output_cap", "max_concurrent_subcalls", "resample_repeats")
"""Numeric ``[run]`` options besides the budget that a project's file may only lower."""

WORKSPACE_KEYS: dict[str, type | tuple[type, ...]] = {
    "sandbox": str,
    "sandbox_options": dict,
    "idle_timeout_s": (int, float),
    "checkpoint_after_task": bool,
    "max_var_bytes": int,
}
"""Keys allowed in a ``[workspace]`` table, with their TOML types."""

LOWER_ONLY_WORKSPACE = ("idle_timeout_s", "max_var_bytes")
"""Numeric ``[workspace]`` keys a project's file may only lower."""


LOWER_ONLY_MODEL_KEYS = ("max_output_tokens", "n_threads", "timeout_s", "max_retries")
"""Numeric model keys a project's file may only lower (below the user's entry or the
default): raised, they would let a call spend, hold threads or retry longer."""

_SPEC_DEFAULTS = {f.name: f.default for f in fields(ModelSpec)}


def check_project_models(
    entry: dict[str, Any], where: str, base: dict[str, Any], name: str | None = None
) -> None:
    """Refuse, in a project's ``[models.NAME]`` or ``[providers.NAME]`` table, what would let
    the project's files steer keys, run code or spend more.

    Args:
        entry: the project's table as parsed.
        where: the file and table, for the message.
        base: the same entry as the built-ins and user config define it (``{}``: none).
        name: the model's name (``None`` for a ``[providers.NAME]`` table).

    Raises:
        ValueError: ``base_url`` / ``api_key_env``, a price, the ``scripted`` provider, a
            local model that is not a known local model, a new ``provider``/``model`` for a
            model the user or the built-ins define, or a key of
            :data:`LOWER_ONLY_MODEL_KEYS` above the user's value or the default.
    """
    for key in (*UNTRUSTED_KEYS, *PRICE_KEYS):
        if key in entry:
            harm = (
                "could send your API key elsewhere"
                if key in UNTRUSTED_KEYS
                else "could understate what a model costs you and so defeat max_usd"
            )
            raise ValueError(
                f"{where}: '{key}' may only be set in the user config "
                f"({paths.user_config_path()}), not in a project's file, which comes with the "
                f"code you are asking about and {harm}"
            )
    model = entry.get("model")
    if entry.get("provider") == "scripted":
        raise ValueError(
            f"{where}: a scripted model ({model!r}) replays or runs a file, so it may only be "
            f"defined in the user config ({paths.user_config_path()}), not in a project's file"
        )
    provider = entry.get("provider", base.get("provider"))
    if provider == "local" and model is not None and model not in KNOWN_LOCAL_MODELS:
        raise ValueError(
            f"{where}: a local model file ({model!r}) may only be named in the user config "
            f"({paths.user_config_path()}); a project's file may use the known local models "
            f"({', '.join(sorted(KNOWN_LOCAL_MODELS))})"
        )
    if "lora_path" in (entry.get("options") or {}):
        raise ValueError(
            f"{where}: options.lora_path loads a file into the model, so it may only be set in "
            f"the user config ({paths.user_config_path()}), not in a project's file"
        )
    if base and name is not None:
        for key, was in (("provider", base.get("provider")), ("model", base.get("model", name))):
            if key in entry and entry[key] != was:
                raise ValueError(
                    f"{where}: {key} = {entry[key]!r} redefines a model your user config or "
                    f"the built-ins define ({key} {was!r}); a project's file may only tighten "
                    f"it (sampling, lower limits); {HINT}"
                )
    sampling = entry.get("sampling")
    for key in sampling if isinstance(sampling, dict) else ():
        if key not in SAMPLING_NUMBERS:
            raise ValueError(
                f"{where}.sampling.{key}: may only be set in the user config "
                f"({paths.user_config_path()}); a project's file may set the sampling numbers "
                f"({', '.join(SAMPLING_NUMBERS)}): another key goes to the provider as it is "
                '(store = true, service_tier = "priority", reasoning_effort... could keep '
                "your prompts on its side or make calls cost more)"
            )
    for key in LOWER_ONLY_MODEL_KEYS:
        ceiling = base.get(key, _SPEC_DEFAULTS[key])
        if key in entry and not entry[key] <= ceiling:
            raise ValueError(
                f"{where}: {key} = {entry[key]!r} is above {ceiling!r} (your config or the "
                f"default); a project's file may only lower it; {HINT}"
            )


def check_project_run(
    run: dict[str, Any], user: dict[str, Any], where: str, models: set[str]
) -> None:
    """Refuse, in a project's ``[run]`` table, a looser sandbox, models other than ``models``
    (those the user config or the built-ins define, and local ones the project defines), and
    budgets above ``user`` (the user's ``[run]``) or the defaults.

    Raises:
        ValueError: see :func:`check_project_sandbox`, :func:`_check_model_names` and
            :func:`_check_budget`.
    """
    check_project_sandbox(run, where)
    _check_model_names(run, where, models)
    _check_budget(run, user, where)


def check_project_workspace(table: dict[str, Any], user: dict[str, Any], where: str) -> None:
    """Refuse, in a project's ``[workspace]`` table, a looser sandbox (see
    :func:`check_project_sandbox`) or a number of :data:`LOWER_ONLY_WORKSPACE` above ``user``
    (the user's ``[workspace]``) or the default: a sandbox idle for ages still holds memory.

    Raises:
        ValueError: naming ``where`` and the key.
    """
    check_project_sandbox(table, where)
    for key in LOWER_ONLY_WORKSPACE:
        ceiling = user.get(key, getattr(WorkspaceSettings, key))
        if key in table and ceiling is not None and not table[key] <= ceiling:
            raise ValueError(
                f"{where}: {key} = {table[key]!r} is above {ceiling!r} (your config or the "
                f"default); a project's file may only lower it; {HINT}"
            )


def check_project_sandbox(table: dict[str, Any], where: str) -> None:
    """Refuse sandbox settings in a project's ``[run]`` or ``[workspace]`` table that would
    loosen isolation.

    Args:
        table: the table as parsed from TOML.
        where: the file and table, for the message (``"/p/.rlmd.toml: [run]"``).

    Raises:
        ValueError: a backend outside :data:`PROJECT_BACKENDS`, a ``sandbox_options`` key
            outside :data:`PROJECT_OPTIONS`, a limit above the default, or ``network = true``;
            the message says to set it in the user config instead.
    """
    backend = table.get("sandbox")
    if backend is not None and backend not in PROJECT_BACKENDS:
        raise ValueError(
            f"{where}: a project config may choose sandbox "
            f"{' or '.join(repr(b) for b in PROJECT_BACKENDS)}, not {backend!r}; {HINT}"
        )
    options = table.get("sandbox_options")
    if options is None:
        return
    if not isinstance(options, dict):
        raise ValueError(f"{where}: sandbox_options must be a table")
    for key in options:
        if key not in PROJECT_OPTIONS:
            raise ValueError(
                f"{where}: a project config may not set sandbox_options.{key} "
                f"(only {', '.join(PROJECT_OPTIONS)}); {HINT}"
            )
    limits = options.get("limits")
    if limits is None:
        return
    if not isinstance(limits, dict):
        raise ValueError(f"{where}: sandbox_options.limits must be a table")
    try:
        asked = Limits.from_dict(limits)
    except ValueError as exc:
        raise ValueError(f"{where}: sandbox_options.limits: {exc}") from None
    default = Limits()
    if asked.network:
        raise ValueError(f"{where}: a project config may not give the sandbox a network; {HINT}")
    for key, value in limits.items():
        ceiling = getattr(default, key)
        if key != "network" and ceiling is not None and value > ceiling:
            raise ValueError(
                f"{where}: a project config may only lower limits; sandbox_options.limits.{key} "
                f"= {value} is above the default {ceiling}; {HINT}"
            )


def _check_model_names(run: dict[str, Any], where: str, models: set[str]) -> None:
    """Refuse, in ``model``, ``sub_model`` and ``models_by_depth``, any name outside
    ``models`` but a ``local:`` known local model (see :func:`check_model_names`)."""
    names: list[tuple[str, Any]] = [(k, run.get(k)) for k in ("model", "sub_model")]
    by_depth = run.get("models_by_depth")
    if isinstance(by_depth, dict):
        names += [(f"models_by_depth.{k}", v) for k, v in by_depth.items()]
    check_model_names(names, where, models)


def check_model_names(
    names: list[tuple[str, Any]], where: str, models: set[str], who: str = "a project's file"
) -> None:
    """Refuse, among ``names`` (``(key, name)`` pairs, for the message), any name outside
    ``models`` but a ``local:`` known local model: ``scripted:``/``local:FILE`` shorthands
    would make the host load a file ``who`` chose, hosted ones (``openai:o3``) would send
    your code to a provider at your expense.

    Args:
        models: the model names the user allows (those the user config or the built-ins
            define...).
        who: who named them, for the message (a project's file, an MCP client).

    Raises:
        ValueError: naming ``where``, the key and the name.
    """
    for key, name in names:
        if not isinstance(name, str) or name in models:
            continue
        provider, sep, rest = name.partition(":")
        if provider == "local" and rest in KNOWN_LOCAL_MODELS:
            continue
        harm = (
            "loads a file"
            if sep and provider in ("scripted", "local")
            else "is not a model your user config or the built-ins define"
        )
        raise ValueError(
            f"{where}: {key} = {name!r} {harm}; {who} may only name configured "
            f"models, never switch your run to another (hosted) model (set it in the user "
            f"config {paths.user_config_path()} or pass --model)"
        )


def user_model_names() -> set[str]:
    """The model names the built-ins and the user config define (no project's file): what
    a less trusted party (a project's file, an MCP client) may name."""
    settings = Settings()
    user = paths.user_config_path()
    if user.is_file():
        read_file(settings, user)
    elif user.exists():  # a folder (or a FIFO, never opened) was passed over without a word
        raise ValueError(f"{user}: not a regular file; the user config is a TOML file")
    return set(settings.models)


def _check_budget(run: dict[str, Any], user: dict[str, Any], where: str) -> None:
    """Refuse a budget (or output cap, sub-call concurrency) above what the user config or
    the built-in default allows: a cloned repository must not raise what a run may spend or
    how long a cell may spin."""
    defaults = {f.name: f.default for f in fields(Budget)}
    defaults.update({f.name: f.default for f in fields(RunConfig) if f.name in LOWER_ONLY_OPTIONS})
    for key, value in run.items():
        if key not in defaults:
            continue
        ceiling = user.get(key, defaults[key])
        if not _is_number(value):
            raise ValueError(
                f"{where}: {key} = {value!r} must be a number (at most {ceiling!r}); a "
                "project's file may only lower budgets"
            )
        if isinstance(ceiling, int | float) and not value <= ceiling:
            raise ValueError(
                f"{where}: {key} = {value!r} is above {ceiling!r} (your config or the default); "
                "a project's file may only lower budgets. Raise it in your user config "
                f"({paths.user_config_path()}) or on the command line"
            )


SECTION_KEYS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "sandbox": {"require_isolation": bool},
    "daemon": {"allow_inprocess": bool},
}
"""The keys of the small top-level tables, with their TOML types."""

TABLES = ("models", "providers", "run", "workspace", "cluster", *SECTION_KEYS)
"""The top-level tables a config file may have (``[cluster]`` is checked by
:class:`rlmd.cluster.settings.ClusterSettings`)."""

_RUN_TYPES: dict[str, str] = {
    "model": "str",
    "sub_model": "str",
    **{f.name: str(f.type) for f in fields(RunConfig)},
}
for _name in ("root_model", "budget", "workspace"):  # set by build_run_config's arguments
    del _RUN_TYPES[_name]
RUN_KEYS = BUDGET_KEYS | set(_RUN_TYPES)
"""Keys a ``[run]`` table may have: :class:`Budget` fields, ``model`` and ``sub_model``, and
the :class:`RunConfig` fields that are not :func:`build_run_config`'s own arguments."""


def _check_sections(data: dict[str, Any], path: Path) -> None:
    """Refuse a top-level table outside :data:`TABLES`, and an unknown key or a value of the
    wrong type in the tables of :data:`SECTION_KEYS` (a typo in ``require_isolation`` must
    not pass silently)."""
    for table, value in data.items():
        if table not in TABLES:
            raise ValueError(
                f"{path}: unknown table [{table}]; allowed: {', '.join(sorted(TABLES))}"
            )
        if table == "cluster":  # checked here too, not only when a run uses the cluster
            from rlmd.cluster.settings import ClusterSettings

            ClusterSettings.from_table(value, f"{path}: [cluster]")
            continue
        keys = SECTION_KEYS.get(table)
        if keys is None:
            continue
        _check_table(value, f"{path}: [{table}]", keys)


def _check_run_keys(run: dict[str, Any], where: str) -> None:
    """Refuse a ``[run]`` key outside :data:`RUN_KEYS`, and a table, string or boolean option
    of another type (numbers: :func:`_check_run_numbers`)."""
    for key, value in run.items():
        if key not in RUN_KEYS:
            raise ValueError(
                f"{where}: unknown key {key!r}; allowed: {', '.join(sorted(RUN_KEYS))}"
            )
        kind = _RUN_TYPES.get(key, "")
        for prefix, expected, name in (
            ("dict", dict, "a table"),
            ("str", str, "a string"),
            ("bool", bool, "true or false"),
        ):
            if kind.startswith(prefix) and not isinstance(value, expected):
                raise ValueError(f"{where}: {key} must be {name}, got {value!r}")


def _check_run_numbers(run: dict[str, Any], where: str) -> None:
    """Refuse a ``[run]`` budget or numeric option that is not a number (a count option of
    :data:`LOWER_ONLY_OPTIONS`: a whole number >= 0) or that :class:`Budget` refuses, with
    ``where`` (file and table) in the message."""
    for key in (*BUDGET_KEYS, *LOWER_ONLY_OPTIONS):
        if key in run and not _is_number(run[key]):
            raise ValueError(f"{where}: {key} must be a number, got {run[key]!r}")
        if key in LOWER_ONLY_OPTIONS and key in run and not isinstance(run[key], int):
            raise ValueError(f"{where}: {key} must be a whole number, got {run[key]!r}")
        if key in LOWER_ONLY_OPTIONS and key in run and run[key] < 0:
            raise ValueError(f"{where}: {key} must be >= 0, got {run[key]!r}")
    try:
        Budget(**{k: v for k, v in run.items() if k in BUDGET_KEYS})
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _check_workspace(table: Any, where: str) -> None:
    """Refuse a ``[workspace]`` table with an unknown key or a value of the wrong type."""
    _check_table(table, where, WORKSPACE_KEYS)
    for key in LOWER_ONLY_WORKSPACE:
        if key in table and not (_is_number(table[key]) and table[key] > 0):
            raise ValueError(f"{where} {key} must be a number > 0, got {table[key]!r}")


def _check_table(table: Any, where: str, keys: dict[str, type | tuple[type, ...]]) -> None:
    """Refuse ``table`` unless it is a dict whose keys are in ``keys`` and whose values have
    the TOML type given there (a bool is not a number: ``1`` is not ``true`` either way).

    Raises:
        ValueError: naming ``where`` (file and table), the key and the allowed keys or type.
    """
    if not isinstance(table, dict):
        raise ValueError(f"{where}: must be a table")
    for key, value in table.items():
        if key not in keys:
            raise ValueError(f"{where}: unknown key {key!r}; allowed: {', '.join(sorted(keys))}")
        expected = keys[key]
        if expected is not bool and isinstance(value, bool) or not isinstance(value, expected):
            names = "number" if isinstance(expected, tuple) else expected.__name__
            raise ValueError(f"{where}.{key}: expected {names}, got {type(value).__name__}")


def _is_number(value: Any) -> bool:
    """An int or float that is not a bool nor NaN."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


# -- model tables -------------------------------------------------------------------------


def _check_fields(table: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    """Validate one model table; ``where`` names the file and table in errors."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: must be a table")
    for key, value in table.items():
        if key not in allowed:
            raise ValueError(f"{where}: unknown key {key!r}; allowed: {', '.join(sorted(allowed))}")
        expected = FIELDS[key]
        number: Any = value  # compared below only for the numeric keys
        if isinstance(value, bool) or not isinstance(value, expected):
            names = "number" if isinstance(expected, tuple) else expected.__name__
            raise ValueError(f"{where}.{key}: expected {names}, got {type(value).__name__}")
        if key in _MINIMUM and number < _MINIMUM[key]:
            raise ValueError(f"{where}.{key}: must be >= {_MINIMUM[key]}, got {value}")
        if key in PRICE_KEYS and not math.isfinite(number):  # NaN would never reach max_usd
            raise ValueError(f"{where}.{key}: must be a finite number, got {value}")
        if key == "timeout_s" and number <= 0:
            raise ValueError(f"{where}.{key}: must be > 0, got {value}")
        if key == "base_url" and (problem := http_url_problem(str(value))):
            # it failed at the run's first model call, after the retries
            raise ValueError(f"{where}.{key}: {shown_url(str(value))!r} {problem}")
    if "sampling" in table:
        _check_sampling(table["sampling"], f"{where}.sampling")
    if "options" in table:  # the one options key every provider reads
        guard_settings("", table["options"], where)
    if "provider" in table and table["provider"] not in PROVIDERS:
        raise ValueError(
            f"{where}.provider: {table['provider']!r} is not one of {', '.join(PROVIDERS)}"
        )
    return dict(table)


SAMPLING_NUMBERS: dict[str, tuple[float, float]] = {
    "temperature": (0, math.inf),
    "top_p": (0, 1),
    "min_p": (0, 1),
    "typical_p": (0, 1),
    "top_k": (0, math.inf),
    "seed": (-math.inf, math.inf),
    "presence_penalty": (-math.inf, math.inf),
    "frequency_penalty": (-math.inf, math.inf),
    "repeat_penalty": (0, math.inf),
}
"""Sampling keys whose value must be a finite number in the given range (inclusive); any
other ``sampling`` key is passed to the provider as is."""

REQUEST_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "stream",
        "stream_options",
        "stop",
        "stop_sequences",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "extra_body",
        "extra_headers",
        "extra_query",
        "timeout",
    }
)
"""Request fields rlmd sets itself, refused as ``sampling`` keys in any config: passed as
they were, ``model`` sent the calls to another model than the one priced, ``n`` made the
server write (and bill) n replies for the one read, and ``extra_body`` replaced the messages
(review22)."""

SAMPLING_WHOLE = ("top_k", "seed")
"""Sampling keys that take a whole number."""


def _check_sampling(sampling: Any, where: str) -> None:
    """Refuse a known sampling key of the wrong type or out of range (``temperature =
    "hot"`` reached the provider, or the local model's llama.cpp call, only at run time).

    Raises:
        ValueError: naming ``where`` (file and table), the key and what it must be.
    """
    if not isinstance(sampling, dict):
        return  # the caller's type check names it
    for key, value in sampling.items():
        if key in REQUEST_KEYS:
            raise ValueError(
                f"{where}.{key}: rlmd sets {key!r} in each request itself; it is not a sampling key"
            )
        if key not in SAMPLING_NUMBERS:
            continue
        low, high = SAMPLING_NUMBERS[key]
        whole = key in SAMPLING_WHOLE
        kind = "a whole number" if whole else "a number"
        if (
            not _is_number(value)
            or (whole and not isinstance(value, int))
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            bounds = (
                f" in [{low:g}, {high:g}]"
                if math.isfinite(low) and math.isfinite(high)
                else f" >= {low:g}"
                if math.isfinite(low)
                else ""
            )
            raise ValueError(f"{where}.{key}: must be {kind}{bounds}, got {value!r}")


def _split_py_ref(model: str) -> tuple[str, str] | None:
    """``("file.py", "func")`` for a ``file.py:func`` reference, else ``None``."""
    file, sep, func = model.rpartition(":")
    if sep and file.endswith(".py") and func.isidentifier():
        return file, func
    return None


def _fix_relative(entry: dict[str, Any], provider: str | None, folder: Path) -> None:
    """Make a relative file path in ``entry["model"]`` relative to the config's ``folder``."""
    model = entry.get("model")
    if not model or provider not in ("local", "scripted"):
        return
    if model in KNOWN_LOCAL_MODELS:
        return
    ref = _split_py_ref(model)
    file, suffix = (ref[0], ":" + ref[1]) if ref else (model, "")
    if not Path(file).expanduser().is_absolute():
        entry["model"] = str(folder / file) + suffix


# -- settings + overrides -----------------------------------------------------------------


def build_run_config(
    settings: Settings,
    *,
    model: str | None = None,
    sub_model: str | None = None,
    sandbox: str | None = None,
    budget: dict[str, Any] | None = None,
    workspace: Path | None = None,
    **options: Any,
) -> RunConfig:
    """A :class:`RunConfig` from explicit arguments over the settings' ``[run]`` defaults.

    Args:
        model, sub_model, sandbox: override the ``[run]`` values (``None``: keep them; the
            fallbacks are :data:`DEFAULT_MODEL` and :data:`rlmd.sandbox.DEFAULT_BACKEND`).
        budget: overrides of :class:`Budget` fields (``None`` values are ignored).
        workspace: the project folder the run is about.
        options: other :class:`RunConfig` fields (tools, output_cap, ...).

    Raises:
        ValueError: an unknown budget or option key in the arguments or the ``[run]`` table.
    """
    defaults = dict(settings.run)
    budget_args = {k: defaults.pop(k) for k in list(defaults) if k in BUDGET_KEYS}
    budget_args.update({k: v for k, v in (budget or {}).items() if v is not None})
    unknown = set(budget_args) - BUDGET_KEYS
    if unknown:
        raise ValueError(f"unknown budget keys: {sorted(unknown)}; known: {sorted(BUDGET_KEYS)}")
    # Pop first so the config's values never reach **merged, then let arguments win.
    root = defaults.pop("model", None)
    sub = defaults.pop("sub_model", None)
    box = defaults.pop("sandbox", None)
    by_depth = {int(k): v for k, v in defaults.pop("models_by_depth", {}).items()}
    known = {f.name for f in fields(RunConfig)}
    merged = {**defaults, **options}
    bad = set(merged) - known
    if bad:
        raise ValueError(f"unknown run options: {sorted(bad)}")
    root_model = model or root or DEFAULT_MODEL
    return RunConfig(
        root_model=root_model,
        # a LoRA adapter's sub-calls (and child roots) go to its base model unless a
        # sub-model is named (issue 13, session 18: the adapter is trained on root turns)
        sub_model=sub_model or sub or adapter_sub_model(root_model),
        models_by_depth=by_depth,
        sandbox=sandbox or box or DEFAULT_BACKEND,
        budget=Budget(**budget_args),
        workspace=str(workspace) if workspace else None,
        **merged,
    )


def allow_inprocess(settings: Settings) -> bool:
    """``[daemon] allow_inprocess`` (a project's file may not set ``[daemon]``): whether a
    socket client may run model code in the daemon's own process. Default ``False``.

    Raises:
        ValueError: ``[daemon]`` is not a table or the value is not a boolean.
    """
    return _flag(settings, "daemon", "allow_inprocess", False)


def require_isolation(settings: Settings, *, default: bool) -> bool:
    """``[sandbox] require_isolation``: refuse to run model code when the subprocess sandbox
    would be unisolated here (see :mod:`rlmd.isolation`); ``default`` when unset (the
    daemon passes ``True``, ``rlmd run`` ``False``). A project may only turn it on.

    Raises:
        ValueError: ``[sandbox]`` is not a table or the value is not a boolean.
    """
    return _flag(settings, "sandbox", "require_isolation", default)


def _flag(settings: Settings, table: str, key: str, default: bool) -> bool:
    """The boolean ``[table] key`` (``default`` when unset).

    Raises:
        ValueError: ``[table]`` is not a table or the value is not a boolean.
    """
    section = settings.sections.get(table) or {}
    value = section.get(key, default) if isinstance(section, dict) else None
    if not isinstance(value, bool):
        raise ValueError(f"[{table}] must be a table and {key} a boolean")
    return value


def workspace_settings(
    settings: Settings, folder: Path, *, idle_timeout_s: float | None
) -> WorkspaceSettings:
    """A daemon workspace's settings from the ``[workspace]`` table (falling back to
    ``[run]`` for the sandbox), with ``idle_timeout_s`` (seconds, the daemon's flag) as the
    default idle time.

    Raises:
        ValueError: a malformed ``[workspace]`` table (the message names ``folder``).
    """
    table = settings.sections.get("workspace") or {}
    if not isinstance(table, dict):
        raise ValueError(f"{folder}: [workspace] must be a table")
    result = WorkspaceSettings(idle_timeout_s=idle_timeout_s)
    result.require_isolation = require_isolation(settings, default=True)
    result.sandbox = str(table.get("sandbox") or settings.run.get("sandbox") or DEFAULT_BACKEND)
    options = table.get("sandbox_options", settings.run.get("sandbox_options", {}))
    if not isinstance(options, dict):
        raise ValueError(f"{folder}: [workspace] sandbox_options must be a table")
    result.sandbox_options = dict(options)
    if "idle_timeout_s" in table:
        value = table["idle_timeout_s"]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{folder}: [workspace] idle_timeout_s must be a number > 0")
        result.idle_timeout_s = float(value)
    if "checkpoint_after_task" in table:
        result.checkpoint_after_task = bool(table["checkpoint_after_task"])
    if "max_var_bytes" in table:
        result.max_var_bytes = int(table["max_var_bytes"])
    return result
