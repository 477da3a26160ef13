"""Score a free-form answer against a known one (the benchmarks and the training rewards).

One entry point, :func:`score_answer`, with these metrics (all give a value in ``[0, 1]``):

``contains``
    S-NIAH / RULER: the fraction of the gold strings found in the answer, case-insensitively.
``exact``
    Exact match after normalisation (case, surrounding quotes, backticks, punctuation and a
    leading ``Answer:``-style prefix are ignored). With ``choices`` (the closed set of
    possible answers, e.g. the labels of an OOLONG question) the answer is right when it
    names the gold choice and no other one, so "The most common label is animal." counts.
``numeric``
    OOLONG's partial credit for counts: ``0.75 ** |gold - answer|``, where the answer's
    number is read after its last ``:`` if there is one there (the published parser), else
    the last number in the text.
``f1``
    Set F1 between the items of the answer (a Python list literal, or a comma / newline /
    semicolon separated list) and the gold items. Items that look like paths also match a
    gold path they are a ``/``-suffix of, and the other way round.
``pairs``
    OOLONG-Pairs: set F1 over unordered pairs of ids, parsed from ``(a, b)`` / ``[a, b]`` /
    ``a-b`` forms in the answer.
``path``
    "Where is X defined?": right when a path in the answer is the gold path, or a ``/``-suffix
    of it, or ends with it; a bare file name also counts when ``unique_basename`` is true
    (no other file in the codebase has that name).

The functions never raise on odd answers: ``None`` or empty text scores 0.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

METRICS = ("contains", "exact", "numeric", "f1", "pairs", "path")

NUMERIC_BASE = 0.75
"""Partial credit per unit of absolute error for numeric answers (OOLONG, RLM paper)."""

_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
_PAIR = re.compile(r"[\(\[\{<]\s*['\"]?(\d+)['\"]?\s*[,;&]\s*['\"]?(\d+)['\"]?\s*[\)\]\}>]")
_PAIR_LOOSE = re.compile(r"\b(\d+)\s*(?:-|–|&|\band\b|\+|/)\s*(\d+)\b")
_PREFIX = re.compile(r"^\s*(?:final\s+)?answer\s*(?:is)?\s*[:=\-]?\s*", re.IGNORECASE)
_PATH_TOKEN = re.compile(r"[\w.\-/\\]+\.\w+")


@dataclass
class Score:
    """One scored answer.

    Attributes:
        value: the score in ``[0, 1]``.
        parsed: what was read from the answer (a number, a set, a string), for the report.
        detail: a short human-readable reason (``"precision 0.50 recall 1.00"``...).
    """

    value: float
    parsed: Any = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def normalize(text: Any) -> str:
    """Lower case, no surrounding quotes/backticks/punctuation, single spaces."""
    s = str(text).strip()
    s = _PREFIX.sub("", s, count=1)
    s = s.strip().strip("`'\"").strip()
    s = s.strip(string.punctuation.replace("_", "").replace("/", "") + " ")
    s = s.strip("`'\"")
    return " ".join(s.lower().split())


def _after_last_colon(text: str) -> str:
    head, sep, tail = text.rpartition(":")
    return tail if sep and tail.strip() else text


def parse_number(text: str | None) -> float | None:
    """The number an answer gives (see the ``numeric`` metric), or ``None``."""
    if text is None:
        return None
    candidates = [text.strip()]
    tail = _after_last_colon(text)
    if tail is not text:
        candidates.insert(0, tail)
    for i, part in enumerate(candidates):
        nums = _NUMBER.findall(part)
        if nums:
            raw = nums[0] if i == 0 and len(candidates) == 2 else nums[-1]
            try:
                return float(raw.replace(",", ""))
            except ValueError:
                continue
    return None


def _literal_items(text: str) -> list[Any] | None:
    start, end = text.find("["), text.rfind("]")
    if start == -1 or end <= start:
        start, end = text.find("("), text.rfind(")")
    if start == -1 or end <= start:
        start, end = text.find("{"), text.rfind("}")
    if start == -1 or end <= start:
        return None
    try:
        value = ast.literal_eval(text[start : end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    if isinstance(value, dict):
        return list(value)
    return None


def parse_items(text: str | None) -> list[str]:
    """The items of a list answer: a Python list/tuple/set literal if there is one, else the
    parts between commas, semicolons, newlines and " and "; bullets and quotes removed."""
    if not text:
        return []
    items = _literal_items(text)
    if items is None:
        body = _after_last_colon(text) if "\n" not in text.strip() else text
        parts = re.split(r"[,;\n]|\band\b", body)
        items = []
        for part in parts:
            part = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s+", "", part)
            if part.strip():
                items.append(part)
    out = []
    for item in items:
        norm = normalize(item)
        if norm:
            out.append(norm)
    return out


def _looks_like_path(s: str) -> bool:
    return "/" in s or s.endswith(".py")


def _path_match(a: str, b: str) -> bool:
    a, b = a.replace("\\", "/").lstrip("./"), b.replace("\\", "/").lstrip("./")
    if a == b:
        return True
    return a.endswith("/" + b) or b.endswith("/" + a)


def _item_match(item: str, gold: str) -> bool:
    if item == gold:
        return True
    if _looks_like_path(gold) and _looks_like_path(item):
        return _path_match(item, gold)
    return False


def f1_matched(
    predicted: Iterable[Any], gold: Iterable[Any], match: Callable[[Any, Any], bool]
) -> tuple[float, float, float]:
    """``(precision, recall, f1)`` with a greedy one-to-one matching of unique items."""
    pred = list(dict.fromkeys(predicted))
    gold_l = list(dict.fromkeys(gold))
    if not pred and not gold_l:
        return 1.0, 1.0, 1.0
    if not pred or not gold_l:
        return 0.0, 0.0, 0.0
    used: set[int] = set()
    hits = 0
    for p in pred:
        for j, g in enumerate(gold_l):
            if j not in used and match(p, g):
                used.add(j)
                hits += 1
                break
    precision, recall = hits / len(pred), hits / len(gold_l)
    f1 = 0.0 if hits == 0 else 2 * precision * recall / (precision + recall)
    return precision, recall, f1


def parse_pairs(text: str | None) -> set[tuple[int, int]]:
    """Unordered id pairs in an answer, each as a sorted tuple."""
    if not text:
        return set()
    found = _PAIR.findall(text) or _PAIR_LOOSE.findall(text)
    pairs = set()
    for a, b in found:
        x, y = int(a), int(b)
        if x != y:
            pairs.add((min(x, y), max(x, y)))
    return pairs


def _mentions(text: str, choice: str) -> bool:
    pattern = r"(?<![\w])" + re.escape(choice.lower()) + r"(?:s|es)?(?![\w])"
    return re.search(pattern, text.lower()) is not None


def score_answer(
    answer: str | None,
    gold: Any,
    metric: str,
    *,
    choices: list[str] | None = None,
    unique_basename: bool = False,
) -> Score:
    """Score ``answer`` against ``gold`` with ``metric`` (see the module docstring).

    Args:
        answer: the system's answer text (``None`` when it gave none).
        gold: a string, a number, a list of strings, or a list of ``[a, b]`` pairs,
            depending on the metric.
        metric: one of :data:`METRICS`.
        choices: for ``exact``, the closed set of possible answers.
        unique_basename: for ``path``, whether a bare file name identifies the file.

    Raises:
        ValueError: an unknown metric.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    text = "" if answer is None else str(answer)
    if not text.strip():
        return Score(0.0, None, "no answer")
    if metric == "contains":
        golds = [gold] if isinstance(gold, str) else [str(g) for g in gold]
        found = [g for g in golds if g.lower() in text.lower()]
        return Score(len(found) / len(golds), found, f"{len(found)}/{len(golds)} found")
    if metric == "exact":
        return _score_exact(text, str(gold), choices)
    if metric == "numeric":
        value = parse_number(text)
        if value is None:
            return Score(0.0, None, "no number")
        delta = abs(float(gold) - value)
        return Score(NUMERIC_BASE**delta, value, f"|delta| = {delta:g}")
    if metric == "f1":
        items = parse_items(text)
        gold_n = [normalize(g) for g in gold]
        p, r, f = f1_matched(items, gold_n, _item_match)
        return Score(f, items, f"precision {p:.2f} recall {r:.2f}")
    if metric == "pairs":
        pairs = parse_pairs(text)
        gold_p = {(min(int(a), int(b)), max(int(a), int(b))) for a, b in gold}
        p, r, f = f1_matched(sorted(pairs), sorted(gold_p), lambda x, y: x == y)
        return Score(f, sorted(pairs), f"{len(pairs)} pairs; precision {p:.2f} recall {r:.2f}")
    return _score_path(text, str(gold), unique_basename)


def _score_exact(text: str, gold: str, choices: list[str] | None) -> Score:
    norm, gold_n = normalize(text), normalize(gold)
    if norm == gold_n:
        return Score(1.0, norm, "exact")
    tail = normalize(_after_last_colon(text))
    if tail == gold_n:
        return Score(1.0, tail, "exact after the last ':'")
    if choices:
        named = [c for c in choices if _mentions(text, c)]
        if named == [c for c in choices if normalize(c) == gold_n]:
            return Score(1.0, named[0], "names the gold choice only")
        return Score(0.0, named, f"names {named}")
    return Score(0.0, norm, "no match")


def _score_path(text: str, gold: str, unique_basename: bool) -> Score:
    gold = gold.replace("\\", "/")
    tokens = [t.strip("`'\".,:;()[]") for t in _PATH_TOKEN.findall(text)]
    for token in tokens:
        token = token.replace("\\", "/").lstrip("./")
        if not token:
            continue
        if "/" in token and _path_match(token, gold):
            return Score(1.0, token, "path matches")
        if "/" not in token and token == gold.rsplit("/", 1)[-1]:
            if unique_basename or "/" not in gold:
                return Score(1.0, token, "unique file name")
            return Score(0.0, token, "file name only, and it is not unique")
    return Score(0.0, tokens, "no matching path")
