"""Named models: the entries of the configuration (see :mod:`rlmd.config`) and
``provider:model`` shorthands, mapped to one cached :class:`Model` instance per name.

A name that is not configured may be a ``provider:model`` shorthand:
``openai:gpt-4.1-mini``, ``anthropic:claude-sonnet-4-5``, ``local:qwen2.5-coder-1.5b``,
``local:/path/x.gguf``, ``scripted:FILE.json``, ``scripted:file.py:func``.

Prices are unknown (``None``) unless configured or the model is in :data:`HOSTED_MODELS`;
``local`` and ``scripted`` models cost nothing. A run with a USD budget (``max_usd``) refuses
a model whose price is unknown rather than count its calls as $0: set ``price_input`` /
``price_output`` in its ``[models.NAME]`` table (``0`` for a server you do not pay for).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from rlmd import paths
from rlmd.models.base import Model, ModelSpec
from rlmd.models.pull import KNOWN_LOCAL_MODELS
from rlmd.redact import register_secret_env

PROVIDERS = ("openai", "anthropic", "local", "scripted")

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
    """The built-in entries: the known local GGUF models (see :mod:`rlmd.models.pull`) and
    the fine-tuned ones (:func:`adapter_entries`)."""
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
    } | adapter_entries()


def adapter_entries() -> dict[str, dict[str, Any]]:
    """Models fine-tuned with ``rlmd train``: each ``<models dir>/adapters/NAME.json``
    (``{"base": local model name or GGUF path, "lora_path": adapter GGUF}``, written by
    :func:`rlmd.train.gguf_lora.register`) is the local base with that LoRA adapter, or,
    without ``lora_path``, the GGUF ``base`` alone (a merged fine-tune). A file that cannot
    be read is skipped."""
    folder = paths.home() / "models" / "adapters"
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json.loads(path.read_text())
            base, lora = str(entry["base"]), entry.get("lora_path")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        entries[path.stem] = {
            "provider": "local",
            "model": base,
            "context_window": 8_192,
            "max_output_tokens": 1_024,
            "price_input": 0.0,
            "price_output": 0.0,
            "options": {"lora_path": str(lora)} if lora else {},
        }
    return entries


def adapter_sub_model(name: str) -> str | None:
    """The default sub-model of a run rooted by ``name``: when ``name`` is a LoRA adapter
    ``rlmd train`` registered (``<models dir>/adapters/NAME.json`` with a ``lora_path``), its
    base model (``base``: a local model's name, or ``local:PATH`` for a GGUF path); else
    ``None`` (sub-calls go to the root model, as before). The adapter is trained on root
    turns only, and measured it answers the labelling sub-calls worse than its base (issue
    13, session 17: 13 of 36 listed categories against the base's 29). A merged fine-tune
    (no ``lora_path``) has no base to fall back to: ``None``. A file that cannot be read
    is ``None``, as :func:`adapter_entries` skips it."""
    if not name or name.startswith(".") or not all(c.isalnum() or c in "._-" for c in name):
        return None  # not a plain name: a shorthand or a path, never an adapter's file
    path = paths.home() / "models" / "adapters" / f"{name}.json"
    try:
        entry = json.loads(path.read_text())
        base, lora = str(entry["base"]), entry.get("lora_path")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not lora or not base:
        return None
    return base if base in KNOWN_LOCAL_MODELS or not base.endswith(".gguf") else f"local:{base}"


def merge_entries(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` over ``base``; the ``sampling`` and ``options`` tables are merged too."""
    merged = {**base, **new}
    for sub in ("sampling", "options"):
        if sub in base and sub in new:
            merged[sub] = {**base[sub], **new[sub]}
    return merged


class Registry:
    """The models rlmd knows by name, and one cached :class:`Model` instance per name.

    Args:
        entries: model entries by name, as :class:`ModelSpec` keyword arguments (``model``
            defaults to the name); default: :func:`builtin_entries`. Build one from the
            config with :meth:`rlmd.config.Settings.registry`.
        shorthand: defaults for ``provider:model`` shorthands, by provider.
    """

    def __init__(
        self,
        entries: dict[str, dict[str, Any]] | None = None,
        shorthand: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self._entries = copy.deepcopy(builtin_entries() if entries is None else entries)
        self._shorthand = copy.deepcopy(shorthand or {})
        self._added: set[str] = set()  # names given to add(), not from config
        self._specs: dict[str, ModelSpec] = {}  # resolved specs, one object per name
        self._models: dict[str, Model] = {}
        for entry in (*self._entries.values(), *self._shorthand.values()):
            register_secret_env(entry.get("api_key_env"))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a cluster executor ships a tree's registry to its nodes): the entries and
        specs without the model instances (clients, loaded weights), which the copy makes
        afresh where it runs."""
        return {**self.__dict__, "_models": {}}

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
            entry = merge_entries(defaults, copy.deepcopy(configured))
            entry.setdefault("model", model)
        else:
            entry = merge_entries(HOSTED_MODELS.get(name, {}), copy.deepcopy(defaults))
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

    def for_run(self) -> Callable[[str], Model]:
        """A ``get`` for one run tree: the cached instances of :meth:`get`, except models that
        are ``per_run`` (scripted), which are created once for this run tree.

        Raises (from the returned function):
            KeyError / ValueError: as :meth:`spec`.
        """
        return RunModels(self)

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


class RunModels:
    """``name -> Model`` for one run tree (:meth:`Registry.for_run`). Picklable, as a
    cluster executor ships it to its nodes: the copy keeps the registry's entries and makes
    its own instances there (a scripted model's copy starts at its first response)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.own: dict[str, Model] = {}

    def __call__(self, name: str) -> Model:
        if name in self.own:
            return self.own[name]
        model = self.registry.get(name)
        if model.per_run:
            model = self.own[name] = create_model(model.spec)
        return model

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self.registry, "own": {}}
