"""Checking command parameters: each command takes one JSON object; every field is typed.

:class:`Params` reads fields one by one with their type and range, then :meth:`Params.done`
rejects keys nobody read (a typo such as ``"budget"`` for ``"budgets"`` is an error, not a
silent default). Every problem raises :class:`~rlmd.server.errors.CommandError` with code
``INVALID_PARAMS`` and the field's dotted name in ``data.field``.
"""

from __future__ import annotations

import math
from typing import Any

from rlmd.server.errors import invalid

MAX_TEXT = 1_000_000
"""Default cap on a text field, characters."""

_MISSING = object()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Params:
    """The parameter object of one command.

    Args:
        raw: what the client sent as the command's single argument (``None`` means ``{}``).
        prefix: dotted prefix for field names in error messages (for nested objects).

    Raises:
        CommandError: ``raw`` is not a JSON object.
    """

    def __init__(self, raw: Any, prefix: str = "") -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            # A nested object names itself: "models must be ...", not "parameters must be ..."
            # (which read as if the whole message were wrong, review12b).
            what = prefix or "parameters"
            raise invalid(f"{what} must be a JSON object, got {_kind(raw)}", prefix or None)
        self.raw = raw
        self.prefix = prefix
        self._read: set[str] = set()

    def _name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def _get(self, key: str, required: bool) -> Any:
        self._read.add(key)
        value = self.raw.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise invalid(f"missing required parameter {self._name(key)!r}", self._name(key))
            return _MISSING
        return value

    def text(
        self,
        key: str,
        *,
        required: bool = False,
        default: str | None = None,
        max_len: int = MAX_TEXT,
        choices: tuple[str, ...] | None = None,
        allow_empty: bool = False,
    ) -> str | None:
        """A string field (``default`` when absent or null)."""
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise invalid(
                f"{self._name(key)} must be a string, got {_kind(value)}", self._name(key)
            )
        if not allow_empty and not value.strip():
            raise invalid(f"{self._name(key)} must not be empty", self._name(key))
        if len(value) > max_len:
            raise invalid(
                f"{self._name(key)} is too long ({len(value):,} characters; at most {max_len:,})",
                self._name(key),
            )
        if "\x00" in value:
            raise invalid(f"{self._name(key)} must not contain NUL characters", self._name(key))
        if choices is not None and value not in choices:
            raise invalid(
                f"{self._name(key)} must be one of {', '.join(choices)}; got {value!r}",
                self._name(key),
            )
        return value

    def integer(
        self,
        key: str,
        *,
        default: int | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
        required: bool = False,
    ) -> int | None:
        """An integer field (a float with an integral value is accepted)."""
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(
                f"{self._name(key)} must be an integer, got {_kind(value)}", self._name(key)
            )
        self._range(key, value, minimum, maximum)
        return value

    def number(
        self,
        key: str,
        *,
        default: float | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float | None:
        """A finite number field."""
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise invalid(
                f"{self._name(key)} must be a finite number, got {_kind(value)}", self._name(key)
            )
        self._range(key, value, minimum, maximum)
        return float(value)

    def _range(self, key: str, value: float, minimum: float | None, maximum: float | None) -> None:
        if minimum is not None and value < minimum:
            raise invalid(f"{self._name(key)} must be >= {minimum}, got {value}", self._name(key))
        if maximum is not None and value > maximum:
            raise invalid(f"{self._name(key)} must be <= {maximum}, got {value}", self._name(key))

    def boolean(self, key: str, *, default: bool) -> bool:
        """A boolean field."""
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise invalid(
                f"{self._name(key)} must be true or false, got {_kind(value)}", self._name(key)
            )
        return value

    def obj(self, key: str) -> Params:
        """A nested object field as :class:`Params` (empty when absent or null)."""
        value = self._get(key, False)
        return Params(None if value is _MISSING else value, self._name(key))

    def done(self) -> None:
        """Raise ``INVALID_PARAMS`` naming the first field that no reader asked for."""
        extra = sorted(set(self.raw) - self._read)
        if extra:
            known = ", ".join(sorted(self._read)) or "none"
            raise invalid(
                f"unknown parameter {self._name(extra[0])!r} (known: {known})",
                self._name(extra[0]),
            )
