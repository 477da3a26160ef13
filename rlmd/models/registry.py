"""Named models: built-in local models, then the user's and the project's TOML config.

Lookup order for :meth:`Registry.spec` (later layers override earlier ones key by key):

1. built-in entries for the known local models (``qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``);
2. the user config, ``paths.user_config_path()`` (``$RLMD_HOME/config.toml``);
3. the project config, ``.rlmd.toml`` or ``rlmd.toml`` in the project folder.

A name that is not configured may be a ``provider:model`` shorthand:
``openai:gpt-4.1-mini``, ``anthropic:claude-sonnet-4-5``, ``local:qwen2.5-coder-1.5b``,
``local:/path/x.gguf``, ``scripted:FILE.json``, ``scripted:file.py:func``.

Config format::

    [models.fast]                      # a model named "fast"
    provider = "openai"                # openai | anthropic | local | scripted
    model = "qwen2.5-coder"            # provider's id; default: the entry's name
    base_url = "http://127.0.0.1:8765/v1"
    api_key_env = "MY_SERVER_KEY"      # the variable's NAME; keys are never written in config
    context_window = 32768             # tokens
    max_output_tokens = 1024           # tokens per call
    price_input = 0.15                 # USD per 1M input tokens
    price_output = 0.60                # USD per 1M output tokens
    n_threads = 1                      # local models only
    timeout_s = 120                    # seconds per request
    max_retries = 3
    [models.fast.sampling]             # passed to the provider as is
    temperature = 0
    [models.fast.options]              # provider extras (local: n_ctx)
    n_ctx = 8192

    [providers.openai]                 # defaults for every "openai:MODEL" shorthand
    base_url = "http://127.0.0.1:8765/v1"

    [run]                              # run defaults, parsed here, used by the engine
    model = "fast"
    max_depth = 1

Relative paths in ``model`` of ``local`` and ``scripted`` entries are relative to the
config file's folder. Other top-level tables are kept in :attr:`Registry.sections` for the
components that own them.

Prices default to 0 (no USD accounting) unless the model is in :data:`HOSTED_MODELS`;
set ``price_input`` / ``price_output`` for anything else you pay for.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

from rlmd import paths
from rlmd.models.base import Model, ModelSpec
from rlmd.models.pull import KNOWN_LOCAL_MODELS
from rlmd.models.redact import register_secret_env

PROVIDERS = ("openai", "anthropic", "local", "scripted")

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

_MINIMUM = {
    "context_window": 1,
    "max_output_tokens": 1,
    "n_threads": 1,
    "max_retries": 0,
    "price_input": 0,
    "price_output": 0,
}

HOSTED_MODELS: dict[str, dict[str, Any]] = {
    # USD per 1M tokens (input, output) and context window in tokens, from the public
    # pricing pages (openai.com/api/pricing, anthropic.com/pricing) as of 2025-10.
    # Not re-checked since; override them in config when they change.
    "openai:gpt-5": {"price_input": 1.25, "price_output": 10.0, "context_window": 400_000},
    "openai:gpt-5-mini": {"price_input": 0.25, "price_output": 2.0, "context_window": 400_000},
    "openai:gpt-5-nano": {"price_input": 0.05, "price_output": 0.40, "context_window": 400_000},
    "openai:gpt-4.1": {"price_input": 2.0, "price_output": 8.0, "context_window": 1_047_576},
    "openai:gpt-4.1-mini": {"price_input": 0.40, "price_output": 1.60, "context_window": 1_047_576},
    "openai:gpt-4.1-nano": {"price_input": 0.10, "price_output": 0.40, "context_window": 1_047_576},
    "openai:gpt-4o": {"price_input": 2.50, "price_output": 10.0, "context_window": 128_000},
    "openai:gpt-4o-mini": {"price_input": 0.15, "price_output": 0.60, "context_window": 128_000},
    "anthropic:claude-opus-4-1": {"price_input": 15.0, "price_output": 75.0, "context_window": 200_000},
    "anthropic:claude-sonnet-4-5": {"price_input": 3.0, "price_output": 15.0, "context_window": 200_000},
    "anthropic:claude-sonnet-4": {"price_input": 3.0, "price_output": 15.0, "context_window": 200_000},
    "anthropic:claude-haiku-4-5": {"price_input": 1.0, "price_output": 5.0, "context_window": 200_000},
}  # fmt: skip
"""Default prices and windows for ``openai:`` / ``anthropic:`` shorthands of these models."""


def builtin_entries() -> dict[str, dict[str, Any]]:
    """The built-in entries: the known local GGUF models (see :mod:`rlmd.models.pull`)."""
    return {
        name: {
            "provider": "local",
            "model": name,
            "context_window": 8_192,  # the n_ctx they load with (KV cache ~0.2 GB at 1.5B)
            "max_output_tokens": 1_024,
            "price_input": 0.0,
            "price_output": 0.0,
        }
        for name in KNOWN_LOCAL_MODELS
    }


UNTRUSTED_KEYS = ("base_url", "api_key_env")
"""Keys a project config may not set: with them a cloned repository could send your API key
to a server of its choosing."""


def _check_untrusted(entry: dict[str, Any], where: str) -> None:
    """Refuse, in a project config, what would let the project's files steer keys or run code."""
    for key in UNTRUSTED_KEYS:
        if key in entry:
            raise ValueError(
                f"{where}: '{key}' may only be set in the user config "
                f"({paths.user_config_path()}), not in a project's file, which comes with the "
                "code you are asking about and could send your API key elsewhere"
            )
    model = entry.get("model")
    if entry.get("provider") == "scripted" and isinstance(model, str) and _split_py_ref(model):
        raise ValueError(
            f"{where}: a scripted model that loads Python code ({model!r}) may only be defined "
            f"in the user config ({paths.user_config_path()}), not in a project's file"
        )
    if entry.get("provider") == "local" and model is not None and model not in KNOWN_LOCAL_MODELS:
        raise ValueError(
            f"{where}: a local model file ({model!r}) may only be named in the user config "
            f"({paths.user_config_path()}); a project's file may use the known local models "
            f"({', '.join(sorted(KNOWN_LOCAL_MODELS))})"
        )


LOWER_ONLY_OPTIONS = ("output_cap", "max_concurrent_subcalls")
"""Numeric ``[run]`` options besides the budget that a project's file may only lower."""


def _check_untrusted_budget(run: dict[str, Any], user: dict[str, Any], where: str) -> None:
    """Refuse, in a project's ``[run]`` table, a budget (or output cap, sub-call concurrency)
    above what the user config or the built-in default allows: a cloned repository must not
    raise what a run may spend or how long a cell may spin."""
    from dataclasses import fields

    from rlmd.engine.budget import Budget
    from rlmd.engine.loop import RunConfig

    defaults = {f.name: f.default for f in fields(Budget)}
    defaults.update({f.name: f.default for f in fields(RunConfig) if f.name in LOWER_ONLY_OPTIONS})
    for key, value in run.items():
        if key not in defaults or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        ceiling = user.get(key, defaults[key])
        if isinstance(ceiling, int | float) and not value <= ceiling:
            raise ValueError(
                f"{where}: {key} = {value!r} is above {ceiling!r} (your config or the default); "
                "a project's file may only lower budgets. Raise it in your user config "
                f"({paths.user_config_path()}) or on the command line"
            )


def _check_untrusted_model_names(run: dict[str, Any], where: str) -> None:
    """Refuse, in a project's ``[run]`` table, model names that are ``scripted:`` or
    ``local:`` shorthands for files (the host would import or parse a file of the project)."""
    names: list[tuple[str, Any]] = [(k, run.get(k)) for k in ("model", "sub_model")]
    by_depth = run.get("models_by_depth")
    if isinstance(by_depth, dict):
        names += [(f"models_by_depth.{k}", v) for k, v in by_depth.items()]
    for key, name in names:
        if not isinstance(name, str):
            continue
        provider, sep, rest = name.partition(":")
        if sep and (
            provider == "scripted" or (provider == "local" and rest not in KNOWN_LOCAL_MODELS)
        ):
            raise ValueError(
                f"{where}: {key} = {name!r} loads a file; a project's file may only name "
                f"configured models (set it in the user config {paths.user_config_path()} or "
                "pass --model)"
            )


def _check_fields(table: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    """Validate one model table; ``where`` names the file and table in errors."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: must be a table")
    for key, value in table.items():
        if key not in allowed:
            raise ValueError(f"{where}: unknown key {key!r}; allowed: {', '.join(sorted(allowed))}")
        expected = FIELDS[key]
        if isinstance(value, bool) or not isinstance(value, expected):
            names = "number" if isinstance(expected, tuple) else expected.__name__
            raise ValueError(f"{where}.{key}: expected {names}, got {type(value).__name__}")
        if key in _MINIMUM and value < _MINIMUM[key]:
            raise ValueError(f"{where}.{key}: must be >= {_MINIMUM[key]}, got {value}")
        if key == "timeout_s" and value <= 0:
            raise ValueError(f"{where}.{key}: must be > 0, got {value}")
    if "provider" in table and table["provider"] not in PROVIDERS:
        raise ValueError(
            f"{where}.provider: {table['provider']!r} is not one of {', '.join(PROVIDERS)}"
        )
    return dict(table)


def _merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` over ``base``; the ``sampling`` and ``options`` tables are merged too."""
    merged = {**base, **new}
    for sub in ("sampling", "options"):
        if sub in base and sub in new:
            merged[sub] = {**base[sub], **new[sub]}
    return merged


def _split_py_ref(model: str) -> tuple[str, str] | None:
    """``("file.py", "func")`` for a ``file.py:func`` reference, else ``None``."""
    file, sep, func = model.rpartition(":")
    if sep and file.endswith(".py") and func.isidentifier():
        return file, func
    return None


class Registry:
    """The models rlmd knows by name, and one cached :class:`Model` instance per name.

    Attributes:
        run_defaults: the ``[run]`` table of the configs (project over user), not interpreted.
        sections: other top-level tables of the configs (project over user), by name.
        sources: the config files that were read, in order.
    """

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Any]] = builtin_entries()
        self._shorthand: dict[str, dict[str, Any]] = {}
        self._added: set[str] = set()  # names given to add(), not from config
        self._specs: dict[str, ModelSpec] = {}  # resolved specs, one object per name
        self._models: dict[str, Model] = {}
        self.run_defaults: dict[str, Any] = {}
        self.sections: dict[str, Any] = {}
        self.sources: list[Path] = []

    @classmethod
    def load(cls, project_dir: Path | None = None) -> Registry:
        """Built-ins, then the user config, then the project config of ``project_dir``.

        Raises:
            ValueError: a config file is not valid TOML, or has an unknown key or a value of
                the wrong type (the message names the file and the key).
        """
        registry = cls()
        user = paths.user_config_path()
        if user.is_file():
            registry.read_config(user)
        if project_dir is not None:
            project = paths.project_config_path(Path(project_dir))
            if project is not None:
                registry.read_config(project, trusted=False)
        return registry

    def read_config(self, path: Path, *, trusted: bool = True) -> None:
        """Apply one TOML config file on top of what is loaded.

        Args:
            trusted: ``False`` for a project's own config file, which arrives with the code
                being asked about: it may not choose where keys are sent (``base_url``,
                ``api_key_env``), load Python code (``scripted`` ``file.py:function``) nor
                loosen the sandbox (see :mod:`rlmd.sandbox.policy`).

        Raises:
            ValueError: invalid TOML, unknown key or wrong type (naming ``path`` and the key),
                or, for an untrusted file, a key only the user config may set.
        """
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: invalid TOML: {exc}") from None
        models = data.pop("models", {})
        if not isinstance(models, dict):
            raise ValueError(f"{path}: 'models' must be a table of [models.NAME] tables")
        for name, table in models.items():
            entry = _check_fields(table, f"{path}: [models.{name}]", set(FIELDS))
            if not trusted:
                _check_untrusted(entry, f"{path}: [models.{name}]")
            if "provider" not in entry and "provider" not in self._entries.get(name, {}):
                raise ValueError(f"{path}: [models.{name}] needs a 'provider' key")
            base = self._entries.get(name, {})
            self._fix_relative(entry, entry.get("provider", base.get("provider")), path.parent)
            self._entries[name] = _merge(base, entry)
            self._added.discard(name)
            register_secret_env(self._entries[name].get("api_key_env"))
        providers = data.pop("providers", {})
        if not isinstance(providers, dict):
            raise ValueError(f"{path}: 'providers' must be a table of [providers.NAME] tables")
        for provider, table in providers.items():
            if provider not in PROVIDERS:
                raise ValueError(f"{path}: [providers.{provider}]: unknown provider")
            allowed = set(FIELDS) - {"provider", "model"}
            entry = _check_fields(table, f"{path}: [providers.{provider}]", allowed)
            if not trusted:
                _check_untrusted(entry, f"{path}: [providers.{provider}]")
            self._shorthand[provider] = _merge(self._shorthand.get(provider, {}), entry)
            register_secret_env(entry.get("api_key_env"))
        self._specs = {k: v for k, v in self._specs.items() if k in self._added}
        run = data.pop("run", {})
        if not isinstance(run, dict):
            raise ValueError(f"{path}: 'run' must be a table")
        if not trusted:  # a project may tighten the sandbox, never loosen it
            from rlmd.sandbox.policy import check_project_sandbox

            check_project_sandbox(run, f"{path}: [run]")
            _check_untrusted_model_names(run, f"{path}: [run]")
            _check_untrusted_budget(run, self.run_defaults, f"{path}: [run]")
            workspace = data.get("workspace")
            if isinstance(workspace, dict):
                check_project_sandbox(workspace, f"{path}: [workspace]")
        self.run_defaults.update(run)
        self.sections.update(data)
        self.sources.append(path)

    @staticmethod
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

    def names(self) -> list[str]:
        """Every configured or added model name, sorted."""
        return sorted(set(self._entries) | set(self._added))

    def add(self, spec: ModelSpec) -> None:
        """Register ``spec`` under ``spec.name`` (replacing an entry and its cached model)."""
        self._added.add(spec.name)
        self._specs[spec.name] = spec
        self._models.pop(spec.name, None)
        register_secret_env(spec.api_key_env)

    def spec(self, name: str) -> ModelSpec:
        """The spec for a configured name or a ``provider:model`` shorthand.

        The same object is returned for a name every time, and :meth:`get` creates the
        model from it, so changing it before the first ``get`` (e.g. ``n_threads`` from a
        CLI flag) takes effect.

        Raises:
            KeyError: unknown name (the message lists the known names).
            ValueError: a shorthand with an unknown provider or an empty model.
        """
        spec = self._specs.get(name)
        if spec is None:
            spec = self._specs[name] = self._resolve(name)
        return spec

    def _resolve(self, name: str) -> ModelSpec:
        if name in self._entries:
            entry = copy.deepcopy(self._entries[name])
            entry.setdefault("model", name)
            return ModelSpec(name=name, **entry)
        provider, sep, model = name.partition(":")
        if sep and provider in PROVIDERS:
            return self._shorthand_spec(name, provider, model)
        raise KeyError(
            f"unknown model {name!r}; known: {', '.join(self.names())} "
            f"(or a shorthand provider:model with provider in {', '.join(PROVIDERS)})"
        )

    def _shorthand_spec(self, name: str, provider: str, model: str) -> ModelSpec:
        if not model:
            raise ValueError(f"{name!r}: empty model after '{provider}:'")
        defaults = self._shorthand.get(provider, {})
        configured = self._entries.get(model, {})
        if provider == "local" and configured.get("provider") == "local":
            # local:qwen2.5-coder-1.5b keeps the settings of qwen2.5-coder-1.5b
            entry = _merge(defaults, copy.deepcopy(configured))
            entry.setdefault("model", model)
        else:
            entry = _merge(HOSTED_MODELS.get(name, {}), copy.deepcopy(defaults))
            entry["model"] = model
        entry["provider"] = provider
        return ModelSpec(name=name, **entry)

    def get(self, name: str) -> Model:
        """The model instance for ``name``, created once and cached (a local model loads once).

        Raises:
            KeyError / ValueError: as :meth:`spec`.
        """
        model = self._models.get(name)
        if model is None:
            model = create_model(self.spec(name))
            self._models[name] = model
        return model

    def list(self) -> list[tuple[ModelSpec, str | None]]:
        """Every configured or added model with ``None`` if usable now, else the reason."""
        result = []
        for name in self.names():
            model = self.get(name)
            result.append((model.spec, model.availability()))
        return result

    async def aclose(self) -> None:
        """Close every model instance created by :meth:`get`."""
        models, self._models = list(self._models.values()), {}
        for model in models:
            await model.aclose()


def create_model(spec: ModelSpec) -> Model:
    """A new :class:`Model` for ``spec`` (imports only the provider's module).

    Raises:
        ValueError: unknown provider.
    """
    if spec.provider == "openai":
        from rlmd.models.openai import OpenAIModel

        return OpenAIModel(spec)
    if spec.provider == "anthropic":
        from rlmd.models.anthropic import AnthropicModel

        return AnthropicModel(spec)
    if spec.provider == "local":
        from rlmd.models.local import LocalModel

        return LocalModel(spec)
    if spec.provider == "scripted":
        from rlmd.models.scripted import ScriptedModel

        return ScriptedModel(spec)
    raise ValueError(f"{spec.name}: unknown provider {spec.provider!r}; use one of {PROVIDERS}")
