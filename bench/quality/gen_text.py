"""Generators over text: S-NIAH haystacks, OOLONG-like windows, their questions and pairs.

Designs follow the papers' task shapes (RULER's single needle; OOLONG's
``Date || User || Instance`` lines with labels kept aside; OOLONG-Pairs' pair questions).
All wording here is our own. Every function takes a ``random.Random`` and a token counter
``count(text) -> int`` and is deterministic given them.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

Count = Callable[[str], int]

_SENTENCE_END = re.compile(r"(?<=[.!?])(?=\s)")


def split_sentences(text: str) -> list[str]:
    """Sentences, each with the whitespace before it, so ``"".join`` restores the text."""
    parts = _SENTENCE_END.split(text)
    return [p for p in parts if p]


def fit_units(units: Sequence[str], budget: int, count: Count, sep: str = "") -> int:
    """The largest ``k`` such that ``count(sep.join(units[:k])) <= budget`` (0 if none),
    found with a few proportional guesses and a final walk; ``units`` must be long enough."""
    if budget <= 0 or not units:
        return 0
    cum = [0]
    for u in units:
        cum.append(cum[-1] + len(u) + len(sep))

    def k_for_chars(chars: float) -> int:
        lo, hi = 0, len(units)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if cum[mid] <= chars:
                lo = mid
            else:
                hi = mid - 1
        return lo

    sample = sep.join(units[: min(len(units), 64)])
    ratio = len(sample) / max(1, count(sample))  # characters per token
    k = k_for_chars(budget * ratio)
    for _ in range(4):
        if k == 0:
            return 0
        got = count(sep.join(units[:k]))
        if got <= budget and (k == len(units) or got >= budget * 0.98):
            break
        ratio *= budget / max(got, 1)
        k = max(1, k_for_chars(budget * ratio * (0.995 if got > budget else 1.0)))
    step = max(1, k // 200)
    while k > 0 and count(sep.join(units[:k])) > budget:
        k = max(0, k - step)
    return k


def cycle_from(items: Sequence[str], start: int, n: int) -> list[str]:
    """``n`` items of ``items`` from ``start``, wrapping around (a haystack repeats)."""
    return [items[(start + i) % len(items)] for i in range(n)]


# -- S-NIAH ---------------------------------------------------------------------------------


@dataclass
class Needle:
    key: str
    value: str
    sentence: str
    depth: float
    position: int  # character offset in the context


def needle_key(rng: random.Random, adjectives: Sequence[str], nouns: Sequence[str]) -> str:
    return f"{rng.choice(adjectives)}-{rng.choice(nouns)}"


def sniah_context(
    rng: random.Random,
    sentences: Sequence[str],
    target_tokens: int,
    depth: float,
    key: str,
    count: Count,
    fill: float = 0.95,
) -> tuple[str, Needle]:
    """A haystack of ``fill * target_tokens`` tokens from ``sentences`` (starting at a seeded
    sentence, repeating if needed) with one needle sentence inserted at the sentence
    boundary closest to ``depth`` (0 = start, 1 = end)."""
    value = str(rng.randrange(1_000_000, 10_000_000))
    needle = f"The special magic number for {key} is {value}."
    budget = int(target_tokens * fill) - count(" " + needle + " ")
    start = rng.randrange(len(sentences))
    avg = max(1, sum(len(s) for s in sentences[:500]) // min(500, len(sentences)))
    est = int(budget * 6 / avg) + 16  # ~6 characters per token is a safe overestimate
    units = cycle_from(sentences, start, est)
    k = fit_units(units, budget, count)
    units = units[:k]
    at = round(depth * len(units))
    before = "".join(units[:at])
    sep_before = "" if not before or before[-1].isspace() else " "
    text = before + sep_before + needle + " " + "".join(units[at:]).lstrip()
    return text, Needle(key, value, needle, depth, len(before) + len(sep_before))


def sniah_question(key: str) -> str:
    return (
        f"Somewhere in the text there is a sentence giving the special magic number for "
        f"{key}. What is the special magic number for {key}? Answer with the number only."
    )


# -- OOLONG-like windows --------------------------------------------------------------------


@dataclass
class Record:
    date: dt.date
    user: int
    text: str
    label: str

    def line(self) -> str:
        return f"Date: {self.date:%b %d, %Y} || User: {self.user} || Instance: {self.text}"


@dataclass
class Window:
    records: list[Record]
    labels: list[str]
    mix: dict[str, float] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(r.line() for r in self.records) + "\n"

    def label_counts(self) -> Counter:
        c = Counter({label: 0 for label in self.labels})
        c.update(r.label for r in self.records)
        return c

    def users(self) -> list[int]:
        return sorted({r.user for r in self.records})

    def user_counts(self, label: str) -> Counter:
        c = Counter({u: 0 for u in self.users()})
        c.update(r.user for r in self.records if r.label == label)
        return c


def oolong_window(
    rng: random.Random,
    pool: dict[str, Sequence[str]],
    target_tokens: int,
    count: Count,
    fill: float = 0.95,
    items_per_user: float = 4.0,
) -> Window:
    """Labelled lines filling ``fill * target_tokens`` tokens.

    The label mix is drawn from a flat Dirichlet (so the priors reveal nothing), dates are
    uniform over 2022-2024, and user ids are 5-digit numbers skewed 80/20 (80 % of the
    lines come from 20 % of the users), about ``items_per_user`` lines per user.
    """
    labels = sorted(pool)
    weights = [rng.gammavariate(1.0, 1.0) for _ in labels]
    total = sum(weights)
    mix = {label: w / total for label, w in zip(labels, weights, strict=True)}
    first, last = dt.date(2022, 1, 1).toordinal(), dt.date(2024, 12, 31).toordinal()

    def draw(users: list[int]) -> Record:
        label = rng.choices(labels, weights=weights)[0]
        text = rng.choice(pool[label])
        hot = users[: max(1, len(users) // 5)]
        user = rng.choice(hot) if rng.random() < 0.8 else rng.choice(users)
        return Record(dt.date.fromordinal(rng.randint(first, last)), user, text, label)

    probe_users = [10000 + i for i in range(10)]
    probe = [draw(probe_users).line() for _ in range(24)]
    per_line = max(1.0, count("\n".join(probe)) / len(probe))
    n_est = max(2, int(target_tokens * fill / per_line))
    n_users = max(3, round(n_est / items_per_user))
    users = rng.sample(range(10000, 100000), n_users)
    records = [draw(users) for _ in range(int(n_est * 1.3) + 8)]
    lines = [r.line() for r in records]
    k = fit_units([ln + "\n" for ln in lines], int(target_tokens * fill), count)
    return Window(records[:k], labels, mix)


def describe_lines(labels: Sequence[str]) -> str:
    return (
        "The text is a list of lines of the form 'Date: ... || User: ... || Instance: ...'. "
        "Each instance is a short description of something that belongs to exactly one of "
        f"these categories: {', '.join(labels)}. The categories are not written in the text: "
        "decide each instance's category from its description."
    )


OOLONG_TEMPLATES = (
    "most_common",
    "least_common",
    "count_label",
    "compare",
    "user_count",
    "user_most",
)

COMPARE_CHOICES = ["more common", "less common", "same frequency"]


def oolong_question(
    rng: random.Random, window: Window, template: str
) -> tuple[str, Any, str, list[str] | None, dict[str, Any]] | None:
    """``(question, answer, metric, choices, params)`` or ``None`` when the window does not
    give this template a single well-defined answer (a tie)."""
    counts = window.label_counts()
    head = describe_lines(window.labels) + " "
    labels = window.labels
    if template in ("most_common", "least_common"):
        ranked = counts.most_common()
        best = ranked[0] if template == "most_common" else ranked[-1]
        if sum(1 for _, n in ranked if n == best[1]) > 1:
            return None
        word = "most" if template == "most_common" else "least"
        q = f"Which category is the {word} common among all the instances? Answer with the category only."
        return head + q, best[0], "exact", list(labels), {"template": template}
    if template == "count_label":
        label = rng.choice(labels)
        q = f"How many instances belong to the category {label}? Answer with a number only."
        return head + q, counts[label], "numeric", None, {"template": template, "label": label}
    if template == "compare":
        a, b = rng.sample(list(labels), 2)
        rel = (
            "more common"
            if counts[a] > counts[b]
            else "less common"
            if counts[a] < counts[b]
            else "same frequency"
        )
        q = (
            f"Is the category {a} more common, less common, or the same frequency as the "
            f"category {b}? Answer with 'more common', 'less common' or 'same frequency'."
        )
        return head + q, rel, "exact", COMPARE_CHOICES, {"template": template, "labels": [a, b]}
    if template == "user_count":
        label = rng.choice(labels)
        users = window.users()
        busy = [u for u in users if sum(1 for r in window.records if r.user == u) >= 2] or users
        user = rng.choice(busy)
        n = window.user_counts(label)[user]
        q = (
            f"How many instances of user {user} belong to the category {label}? "
            "Answer with a number only."
        )
        return head + q, n, "numeric", None, {"template": template, "label": label, "user": user}
    if template == "user_most":
        label = rng.choice(labels)
        ranked = window.user_counts(label).most_common()
        if not ranked or ranked[0][1] == 0 or (len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
            return None
        busiest = Counter(r.user for r in window.records).most_common(1)[0][0]
        if ranked[0][0] == busiest:
            return None  # guessable without classifying anything: the user with most lines
        q = (
            f"Which user has the most instances in the category {label}? "
            "Answer with the user id only."
        )
        choices = [str(u) for u in window.users()]
        return head + q, str(ranked[0][0]), "exact", choices, {"template": template, "label": label}
    raise ValueError(f"unknown template {template!r}")


# -- OOLONG-Pairs-like ----------------------------------------------------------------------

PAIR_TEMPLATES = ("both_have", "both_have_either", "one_each", "both_exactly_one", "both_none")


def _users_with(window: Window, pred: Callable[[Counter], bool]) -> list[int]:
    per_user: dict[int, Counter] = {u: Counter() for u in window.users()}
    for r in window.records:
        per_user[r.user][r.label] += 1
    return [u for u, c in per_user.items() if pred(c)]


def pairs_question(
    rng: random.Random, window: Window, template: str, max_pairs: int = 1000
) -> tuple[str, list[list[int]], dict[str, Any]] | None:
    """``(question, sorted gold pairs, params)`` or ``None`` when the answer would be empty
    or have more than ``max_pairs`` pairs."""
    labels = window.labels
    a, b = rng.sample(list(labels), 2)
    if template == "both_have":
        cond = f"both users have at least one instance in the category {a}"
        pairs = set(combinations(_users_with(window, lambda c: c[a] >= 1), 2))
    elif template == "both_have_either":
        cond = f"both users have at least one instance in the category {a} or {b}"
        pairs = set(combinations(_users_with(window, lambda c: c[a] + c[b] >= 1), 2))
    elif template == "one_each":
        cond = (
            f"one of the users has at least one instance in the category {a} and the other "
            f"has at least one instance in the category {b}"
        )
        xs, ys = _users_with(window, lambda c: c[a] >= 1), _users_with(window, lambda c: c[b] >= 1)
        pairs = {(min(x, y), max(x, y)) for x in xs for y in ys if x != y}
    elif template == "both_exactly_one":
        cond = f"both users have exactly one instance in the category {a}"
        pairs = set(combinations(_users_with(window, lambda c: c[a] == 1), 2))
    elif template == "both_none":
        cond = f"neither user has any instance in the category {a}"
        pairs = set(combinations(_users_with(window, lambda c: c[a] == 0), 2))
    else:
        raise ValueError(f"unknown template {template!r}")
    gold = sorted([min(x, y), max(x, y)] for x, y in pairs)
    if not gold or len(gold) > max_pairs:
        return None
    q = (
        describe_lines(labels)
        + f" List every pair of user ids such that {cond}. Write each pair once, as "
        "(smaller id, larger id), one pair per line."
    )
    return q, gold, {"template": template, "labels": [a, b], "users": len(window.users())}
