"""The programmatic teacher: a scripted expert that writes the trajectory a good RLM would for
the generated families, run through the real engine and sandbox (so its turns are genuine
rlmd root turns, recorded like any model's).

It knows the task's family and parameters (never the context or the gold answer: its code
must find the answer in the REPL) and plays these strategies, varied per sample by a seeded
choice of wording. Every play's last cell prints the value and its last turn reads it and
writes it out, ``FINAL('...')`` (:class:`rlmd.train.teacher_literal.ReadValue`; session 16:
no target answers ``FINAL(variable)``, and each family's reading note opens with its own
words):

* ``sniah``: search the *whole* input for the key with a regex, print the neighbourhood of
  every hit, pull out the number with a second regex and print it, then read it back.
* ``oolong`` / ``pairs``: split every line into date / user / instance, label every
  instance with one ``llm_query_batched`` map (the categories are not in the text: that is
  the judgement a sub-model gives), then one compute turn of the same shape for every
  template (session 18: :data:`COMPUTE_OPENING`, counts over the *listed* categories only so
  a reply off the list never wins, counts per user, the users, then the template's own
  expression and ``print(answer)``), then read the printed answer back.
* ``codeqa``: walk every file's ``ast`` (definitions, calls, bases, defaults, constants,
  imports), print what was found, then read it back.

**Literal strategies** (:mod:`rlmd.train.teacher_literal`, session 15): for ``sniah`` and
most ``codeqa`` templates a share of the rollouts (``literal_share``, default
:data:`LITERAL_SHARE`, a seeded draw per ``(task, sample)``) play a short program that writes
the question's key or name literally (``i = context.find(KEY)``, ``'def NAME(' in text``,
``find_definition(NAME)``), prints what it found, and answers on the next turn with the value
it *reads* in the printed output (``FINAL("1234567")``): a 0.5B student copies these far
better than the regex and ``ast`` programs above (session 14). Literal plays make no
mistakes. Each play's strategy is recorded (:attr:`Play.strategy`, the rollout's
``details["strategy"]``): ``regex``, ``find``, ``find_lower``, ``ast``, ``grep``,
``find_definition``, ``labels`` (oolong / pairs).

Every cell imports the modules it uses (a cell copied without the turns before it still
runs; the tuned 0.5B copied the teacher's ``re.finditer`` without the earlier ``import re``).

**Repair trajectories.** A share of the rollouts (``repair_share``, default
:data:`REPAIR_SHARE`, chosen per ``(task, sample)`` by its own seeded draw, so the other
rollouts play exactly as before) make one realistic mistake and repair it on the next turn,
through the same engine and sandbox (:data:`MISTAKES` per family):

* ``no_import``: a cell that uses a module (``re``, ``ast``, ``Counter``) without importing
  it raises ``NameError``; the next turn imports it and runs the step again (for ``Counter``
  only the count: the sub-model's labels were computed before the error);
* ``raw_lines`` (oolong, pairs): the per-item sub-call plan applied to the unparsed lines
  raises ``ValueError`` (a line is a string, not a record) before any sub-call; the next turn
  parses the lines, then the plan runs;
* ``narrow_search`` (sniah): a regex that wants the number right after the key finds
  nothing (prints ``None``); the next turn widens it;
* ``unchecked_final`` (sniah): the narrow regex and ``FINAL(number)`` in one cell, nothing
  printed: the answer ``None`` is questioned by the engine's answer verifier
  (:mod:`rlmd.engine.verify`); the next turn widens the search and prints the number.

The mistaken turn's index is recorded (:attr:`Play.mistake_turns`, stored in the rollout's
``details``) so that :mod:`rlmd.train.export` never makes it a target; the repairing turn is
a target. Rollouts fold failed turns as inference does (``fold_failed_turns``, on by
default): the repair's prompt shows a mistake that raised as the engine's fold note (the
exception line, the variables the cell set), which is what a model sees at inference; a
questioned answer or a search that printed ``None`` is not folded and stays as it was.

Sub-calls of a teacher run go to a :class:`RealisticLabeller` (session 18; before, to
:func:`oracle_labeller`, the generator's own labels): the true label in varied forms (other
case, extra words) and, for a seeded share of descriptions, a word of the description, which
the labelling cell maps to ``unknown`` as it does a small sub-model's stray replies at
inference. So the teacher's printed counts show ``unknown`` and its compute step leaves it
out. A reply off the list can change the answer (a count, a pair): such a rollout scores
below 1 and the export's reward filter drops it. Only root turns become training samples. The teacher is used on the
train split only (:func:`rlmd.train.rollout.run_rollouts` refuses a held-out task).
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlmd.train import teacher_literal
from rlmd.train.tasks import TrainTask

FAMILIES = ("sniah", "oolong", "pairs", "codeqa")

REPAIR_SHARE = 0.3
"""Default share of teacher rollouts that make a mistake and repair it."""

LITERAL_SHARE = 0.75
"""Default share of teacher rollouts that play a literal strategy where the task has one
(``sniah``; ``codeqa`` but parameter defaults): the training mix leans on them."""

MISTAKES: dict[str, tuple[str, ...]] = {
    "sniah": ("no_import", "narrow_search", "unchecked_final"),
    "oolong": ("no_import", "raw_lines"),
    "pairs": ("no_import", "raw_lines"),
    "codeqa": ("no_import",),
}
"""The mistakes a repair trajectory may make, per family (see the module docstring)."""

Turn = tuple[str, str]
"""``(one line of reasoning, code)`` of one root turn."""

AnyTurn = Turn | teacher_literal.Reader
"""A planned turn, or a reader that decides it from the messages when it is played."""


def reply(note: str, code: str) -> str:
    """A root reply: a line of reasoning and one ```repl block."""
    return f"{note}\n```repl\n{code.strip()}\n```"


class Play:
    """The teacher as a scripted-model callable (``play(messages) -> str``): its ``i``-th call
    (0-based) is turn ``i`` and gets ``turns[i]`` (the last turn again past the end). Counted
    by calls, not by the replies in its prompt: with ``fold_failed_turns`` a mistaken turn
    that raised leaves the prompt (a note stands for it), and the repair must still follow.
    The engine calls the root model once per turn for a reply with a code block, and every
    teacher reply has one. A planned turn may be a reader (a callable): it is given the
    messages of its call and returns the ``(note, code)`` turn, e.g. after reading the number
    the last cell printed. One :class:`Play` plays one rollout.

    Attributes:
        turns: the planned ``(note, code)`` turns.
        mistake: the repair trajectory's mistake (a :data:`MISTAKES` name), or ``None``.
        planned_mistakes: indices of the turns that are the mistake.
        mistake_turns: those of them played so far (what a rollout records).
        strategy: the strategy played (see the module docstring).
    """

    def __init__(
        self,
        turns: list[AnyTurn],
        mistake: str | None,
        mistakes: set[int],
        strategy: str = "",
    ) -> None:
        self.turns = turns
        self.strategy = strategy
        self.mistake = mistake
        self.planned_mistakes = sorted(mistakes)
        self.mistake_turns: list[int] = []
        self.calls = 0

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        i = min(self.calls, len(self.turns) - 1)
        self.calls += 1
        if i in self.planned_mistakes and i not in self.mistake_turns:
            self.mistake_turns.append(i)
        turn = self.turns[i]
        note, code = turn(messages) if callable(turn) else turn
        return reply(note, code)


def policy(
    task: TrainTask,
    sample: int = 0,
    repair_share: float = REPAIR_SHARE,
    literal_share: float = LITERAL_SHARE,
) -> Play:
    """A scripted-model callable that plays the teacher on ``task``; with probability
    ``literal_share`` a literal strategy where the task has one, else with probability
    ``repair_share`` a repair trajectory (seeded draws per ``(task.id, sample)``).

    Raises:
        ValueError: the family has no teacher, the task is from the held-out split, or
            ``repair_share`` or ``literal_share`` is not within 0..1.
    """
    if task.family not in FAMILIES:
        raise ValueError(f"the teacher knows {FAMILIES}, not {task.family!r}")
    if task.split == "heldout":
        raise ValueError(f"the teacher never plays a held-out task ({task.id})")
    if not 0.0 <= repair_share <= 1.0:
        raise ValueError(f"repair_share must be within 0..1, not {repair_share}")
    if not 0.0 <= literal_share <= 1.0:
        raise ValueError(f"literal_share must be within 0..1, not {literal_share}")
    literal = _literal(task, sample, literal_share)
    if literal is not None:
        return literal
    rng = random.Random(f"{task.id}:{sample}")
    turns = {"sniah": _sniah, "oolong": _oolong, "pairs": _pairs, "codeqa": _codeqa}[task.family](
        task, rng
    )
    # every play ends printing the value, then a turn that reads it and writes it out
    # (session 16: the variant that answered FINAL(answer) in the computing cell is gone)
    chooser = random.Random(f"repair:{task.id}:{sample}")  # apart from rng: others stay as-is
    strategy = {"sniah": "regex", "codeqa": "ast"}.get(task.family, "labels")
    if chooser.random() >= repair_share:
        return Play(list(turns), None, set(), strategy)
    mistake = chooser.choice(MISTAKES[task.family])
    turns, at = _with_mistake(task, turns, mistake)
    return Play(list(turns), mistake, {at}, strategy)


def _literal(task: TrainTask, sample: int, share: float) -> Play | None:
    """The literal play of ``task`` (:mod:`rlmd.train.teacher_literal`) when the seeded draw
    falls within ``share`` and the task has one, else ``None``."""
    draw = random.Random(f"literal:{task.id}:{sample}")
    if draw.random() >= share:
        return None
    if task.family == "sniah":
        strategy = draw.choice(["find", "find_lower"])
        key = str(task.params.get("key", ""))
        return Play(teacher_literal.sniah(key, strategy == "find_lower"), None, set(), strategy)
    template = str(task.params.get("template"))
    if task.family == "codeqa" and template in teacher_literal.CODEQA_LITERAL:
        strategy = draw.choice(teacher_literal.CODEQA_LITERAL[template])
        turns = teacher_literal.codeqa(template, task.params, strategy)
        if turns:
            return Play(turns, None, set(), strategy)
    return None


def _with_mistake(task: TrainTask, turns: list[AnyTurn], mistake: str) -> tuple[list[AnyTurn], int]:
    """``turns`` with the mistake's turn inserted before the step it gets wrong, and that
    step's note saying what it repairs; returns the turns and the mistake's index."""
    if mistake == "no_import":
        at = next(i for i, t in enumerate(turns) if not callable(t) and _IMPORT.search(t[1]))
        planned = turns[at]
        assert not callable(planned)
        note, code = planned
        unimported = (note, _IMPORT.sub("", code).lstrip("\n"))
        name = _first_import(code)
        if name == "Counter":  # the labels are computed before Counter is used: keep them
            repair = (
                "NameError: `Counter` was used before it was imported; the labels were "
                "computed before the error, so I import it and count them.",
                "from collections import Counter\ncounts = Counter(labels)\nprint(counts)",
            )
            rest = turns[at + 1 :]
            return [*turns[:at], unimported, repair, *rest], at
        repair = (
            f"NameError: `{name}` is not defined: the cell used the module without importing "
            "it. Every cell imports what it uses, so I add the import and run it again.",
            code,
        )
        return [*turns[:at], unimported, repair, *turns[at + 1 :]], at
    if mistake == "raw_lines":  # before the parsing turn (the first)
        plan = _LABEL.format(categories=_categories(task.question)).replace(
            "for _, _, text in records", "for _, _, text in lines"
        )
        bad = (
            "I ask a sub-model to label every line's instance in one batched call, then count "
            "the labels.",
            "lines = context.splitlines()\n" + plan,
        )
        first = turns[0]
        assert not callable(first)
        _, parse = first
        repair = (
            "ValueError: every line is still one string, not a (date, user, instance) record, "
            "so the unpacking failed before any sub-call. I parse the lines first.",
            parse,
        )
        return [bad, repair, *turns[1:]], 0
    # sniah: the extraction turn (index 1) gets the number with too narrow a regex
    key = str(task.params.get("key", ""))
    narrow = (
        f"import re\nkey = {key!r}\n"
        "m = re.search(re.escape(key) + r'\\s*(\\d{5,})', context, re.IGNORECASE)\n"
        "number = m.group(1) if m else None\n"
    )
    extract = turns[1]
    assert not callable(extract)
    code = extract[1]
    if mistake == "narrow_search":
        bad = (
            "The number should follow the key; I extract it with a regex.",
            narrow + "print(number)",
        )
        why = "Nothing matched (None): the number does not follow the key directly. "
    else:  # unchecked_final
        bad = ("The number follows the key; I extract it and answer.", narrow + "FINAL(number)")
        why = "The answer None was questioned: my regex found nothing. "
    repair = (why + "I allow a few words between the key and the number and print it.", code)
    return [turns[0], bad, repair, *turns[2:]], 1


_IMPORT = re.compile(r"^(?:import (\w+)|from \w+ import (\w+))\n", re.M)


def _first_import(code: str) -> str:
    m = _IMPORT.search(code)
    return (m.group(1) or m.group(2)) if m else "a module"


def _sniah(task: TrainTask, rng: random.Random) -> list[AnyTurn]:
    key = str(task.params.get("key", ""))
    var = rng.choice(["hits", "found", "matches"])
    look = (
        rng.choice(
            [
                "I search the whole text for the key and print what surrounds each hit.",
                "The key is a distinctive string: I find every place it occurs in the input.",
            ]
        ),
        f"import re\nkey = {key!r}\n"
        f"{var} = [m.start() for m in re.finditer(re.escape(key), context, re.IGNORECASE)]\n"
        f"print(len(context), {var})\n"
        # one unindented line, not a loop: a cell that ends on a loop's body taught the 0.5B
        # to write that body again and again (session 12, 19 of 195 targets)
        f"print([context[max(0, i - 150): i + 150] for i in {var}[:3]])",
    )
    extract = (
        "The sentence gives the number after the key; I extract it with a regex and check it.",
        f"import re\nkey = {key!r}\n"
        "m = re.search(re.escape(key) + r'\\D{0,40}?(\\d{5,})', context, re.IGNORECASE)\n"
        "number = m.group(1) if m else None\nprint(number)",
    )
    return [look, extract, teacher_literal.number_read(key)]


_SPLIT_LINES = """\
records = []
for line in context.splitlines():
    parts = [p.strip() for p in line.split("||")]
    if len(parts) == 3:
        records.append((parts[0].removeprefix("Date: "), parts[1].removeprefix("User: "),
                        parts[2].removeprefix("Instance: ")))
print(len(records), records[:2])"""

# short flat lines (session 17): session 16's student broke the multi-line prompt
# comprehension this cell had ("for _, _, text in re..."); same prompts, same sub-calls
_LABEL = """\
categories = {categories!r}
ask = "Which one of these categories does the description belong to: " + ", ".join(categories)
ask += "? Answer with the category only.\\nDescription: "
prompts = [ask + text for _, _, text in records]
replies = llm_query_batched(prompts)
labels = [next((c for c in categories if c in r.lower()), "unknown") for r in replies]
from collections import Counter
counts = Counter(labels)
print(counts)"""


def _categories(question: str) -> list[str]:
    m = re.search(r"these categories: ([^.]+)\.", question)
    return [c.strip() for c in m.group(1).split(",")] if m else []


def _aggregation_prelude(task: TrainTask, rng: random.Random) -> list[Turn]:
    # the first words name what the question shows (records, one per line, to parse and
    # label), never a needle's "I look for ..." (session 16: oolong opened like a needle)
    return [
        (
            rng.choice(
                [
                    "Lines of 'Date || User || Instance' records: I parse every line into its "
                    "three fields, to label each instance next.",
                    "Every line is a record with a date, a user and an instance: I split the "
                    "lines into fields before labelling them.",
                ]
            ),
            _SPLIT_LINES,
        ),
        (
            "The categories are not in the text: a sub-model labels each instance, in one "
            "batched call.",
            _LABEL.format(categories=_categories(task.question)),
        ),
    ]


# The compute turn (session 18): one shape for every oolong and pairs template. The same
# first words, the same skeleton (the labels of the listed categories only, so a sub-model's
# reply off the list, `unknown`, never wins a count; counts, counts per user, the users), then
# the template's own expression and `print(answer)`. Session 17's student read its answer
# from the labelling cell's Counter (its top label `unknown`) or started over: the 16 compute
# turns of its data had 11 shapes, one per template.
_COMPUTE_HEAD = """\
from collections import Counter
known = [(int(user), label) for (_, user, _), label in zip(records, labels) if label in categories]
counts = Counter(label for _, label in known)
by_user = Counter(known)
users = sorted({int(user) for _, user, _ in records})"""

COMPUTE_OPENING = "I count the listed categories only (a reply off the list is `unknown`):"
"""The first words of every aggregation compute turn's note."""


def _compute(asks: str, expression: str) -> Turn:
    """The compute turn: :data:`COMPUTE_OPENING`, what the question asks, the shared skeleton,
    the template's ``expression`` (one or two lines that set ``answer``), ``print(answer)``."""
    note = f"{COMPUTE_OPENING} the question asks {asks}."
    return note, f"{_COMPUTE_HEAD}\n{expression}\nprint(answer)"


def _oolong(task: TrainTask, rng: random.Random) -> list[AnyTurn]:
    p, t = task.params, task.params.get("template")
    # the reading turn opens with "Category" or "User" (no other family's final turn does)
    if t == "most_common":
        asks, expr = (
            "for the most common category",
            "answer = max(categories, key=lambda c: counts[c])",
        )
        say = "Category `{v}` is the most common one."
    elif t == "least_common":
        asks, expr = (
            "for the least common category",
            "answer = min(categories, key=lambda c: counts[c])",
        )
        say = "Category `{v}` is the least common one."
    elif t == "count_label":
        label = p["label"]
        asks, expr = f"how many instances are in {label}", f"answer = counts[{label!r}]"
        say = f"Category `{label}` has {{v}} instances."
    elif t == "compare":
        a, b = p["labels"]
        asks = f"how {a} compares with {b}"
        expr = (
            f"answer = 'more common' if counts[{a!r}] > counts[{b!r}] else 'less common' "
            f"if counts[{a!r}] < counts[{b!r}] else 'same frequency'"
        )
        say = f"Category `{a}` against `{b}`: {{v}}."
    elif t == "user_count":
        user, label = int(p["user"]), p["label"]
        asks, expr = (
            f"how many {label} instances user {user} has",
            f"answer = by_user[({user}, {label!r})]",
        )
        say = f"User {user} has {{v}} instances in `{label}`."
    else:  # user_most
        label = p["label"]
        asks = f"which user has the most {label} instances"
        expr = f"answer = max(users, key=lambda u: by_user[(u, {label!r})])"
        say = f"User {{v}} has the most instances in `{label}`."
    return [
        *_aggregation_prelude(task, rng),
        _compute(asks, expr),
        teacher_literal.ReadValue("line", say, "answer"),
    ]


_PAIR_CONDITIONS = {
    "both_have": "by_user[(u, {a!r})] >= 1",
    "both_have_either": "by_user[(u, {a!r})] + by_user[(u, {b!r})] >= 1",
    "both_exactly_one": "by_user[(u, {a!r})] == 1",
    "both_none": "by_user[(u, {a!r})] == 0",
}


def _pairs(task: TrainTask, rng: random.Random) -> list[AnyTurn]:
    a, b = task.params.get("labels", ["", ""])
    t = str(task.params.get("template"))
    if t == "one_each":
        expr = (
            "answer = sorted({(min(x, y), max(x, y)) for x in users for y in users\n"
            f"                 if x != y and by_user[(x, {a!r})] >= 1 and by_user[(y, {b!r})] >= 1}})"
        )
    else:
        cond = _PAIR_CONDITIONS.get(t, _PAIR_CONDITIONS["both_have"]).format(a=a, b=b)
        expr = (
            f"ok = [u for u in users if {cond}]\nanswer = [(x, y) for x in ok for y in ok if x < y]"
        )
    return [
        *_aggregation_prelude(task, rng),
        _compute(f"for the pairs of users with {a} and {b}", expr),
        teacher_literal.ReadValue(
            "list", "Pairs of users: {n} qualify, so I write them all out.", "answer"
        ),
    ]


def _codeqa(task: TrainTask, rng: random.Random) -> list[AnyTurn]:
    p, t = task.params, task.params.get("template")
    walk = (
        "import ast\ntrees = {path: ast.parse(text) for path, text in context.items() "
        "if path.endswith('.py')}\n"
    )
    if t == "where_defined":
        name = p["name"]
        code = (
            walk + "found = [path for path, tree in trees.items() for n in ast.walk(tree)\n"
            "         if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))"
            f" and n.name == {name!r}]\nprint(found)\nanswer = found[0] if found else None"
        )
        read = teacher_literal.defined_in(name)
    elif t == "call_count":
        name = p["name"]
        code = (
            walk + "def called(f):\n"
            "    return f.id if isinstance(f, ast.Name) else "
            "f.attr if isinstance(f, ast.Attribute) else None\n"
            "answer = sum(1 for tree in trees.values() for n in ast.walk(tree)\n"
            f"             if isinstance(n, ast.Call) and called(n.func) == {name!r})\n"
            "print(answer)"
        )
        read = teacher_literal.called(name)
    elif t == "subclasses":
        base = p["base"]
        code = (
            walk + "def base_name(b):\n"
            "    return b.id if isinstance(b, ast.Name) else "
            "b.attr if isinstance(b, ast.Attribute) else None\n"
            "answer = sorted({n.name for tree in trees.values() for n in ast.walk(tree)\n"
            f"                 if isinstance(n, ast.ClassDef) and {base!r} in "
            "[base_name(b) for b in n.bases]})\nprint(answer)"
        )
        read = teacher_literal.subclasses_of(base)
    elif t == "param_default":
        fn, param = p["function"], p["param"]
        code = (
            walk + "answer = None\nfor tree in trees.values():\n"
            "    for n in ast.walk(tree):\n"
            f"        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == {fn!r}:\n"
            "            args = n.args.posonlyargs + n.args.args\n"
            "            pairs = list(zip(args[len(args) - len(n.args.defaults):], n.args.defaults))\n"
            "            pairs += [(a, d) for a, d in zip(n.args.kwonlyargs, n.args.kw_defaults) if d]\n"
            "            for a, d in pairs:\n"
            f"                if a.arg == {param!r}:\n"
            "                    answer = ast.unparse(d)\nprint(answer)"
        )
        read = teacher_literal.defaults_to(fn, param)
    elif t == "module_constant":
        name = p["name"]
        code = (
            walk + "answer = None\nfor tree in trees.values():\n"
            "    for n in tree.body:\n"
            "        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and "
            f"t.id == {name!r} for t in n.targets):\n"
            "            answer = ast.unparse(n.value)\nprint(answer)"
        )
        read = teacher_literal.set_to(name)
    else:  # importers
        mod = p["module"]
        code = (
            walk + "def imports(tree, mod):\n"
            "    for n in ast.walk(tree):\n"
            "        if isinstance(n, ast.Import) and any(a.name == mod or "
            "a.name.startswith(mod + '.') for a in n.names):\n"
            "            return True\n"
            "        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 and "
            "(n.module == mod or n.module.startswith(mod + '.')):\n"
            "            return True\n"
            "    return False\n"
            f"answer = sorted(path for path, tree in trees.items() if imports(tree, {mod!r}))\n"
            "print(answer)"
        )
        read = teacher_literal.imported_by(mod)
    look = (
        rng.choice(
            [
                "I list the files to see the codebase's layout.",
                "First a look at which files the codebase has.",
            ]
        ),
        "print(len(context))\nprint(list_files()[:30])",
    )
    return [
        look,
        ("Exact answers come from the syntax tree of every file, not from a text search.", code),
        read,
    ]


_ORACLE: dict[str, str] = {}


def oracle_labeller(messages: list[dict[str, Any]]) -> str:
    """The teacher runs' sub-model: the generator's own label of the instance named after
    ``Description:`` in the last user message (WordNet, ``bench/quality/sources``), or
    ``"unknown"``."""
    if not _ORACLE:
        from rlmd.train.tasks import bench_on_path

        bench_on_path()
        from bench.quality import sources

        _ORACLE.update({item.text: item.label for item in sources.wordnet_items()})
    desc = _last_user(messages).rsplit("Description:", 1)[-1].strip()
    return _ORACLE.get(desc, "unknown")


OFF_LIST_SHARE = 0.12
"""Default share of a :class:`RealisticLabeller`'s replies that name no listed category."""

_FORMS = (
    "{label}",
    "{Label}",
    "{LABEL}",
    "{Label}.",
    "Category: {label}",
    "The category is {label}.",
    "{Label} (the description's category)",
)


class RealisticLabeller:
    """A teacher run's sub-model that answers like the small models that answer sub-calls
    at inference (session 17: the base 0.5B named a listed category for 23–29 of 33–36
    descriptions): the true label in varied forms (other case, extra words: ``Animal.``,
    ``Category: plant``), and for a share ``off_list`` of descriptions (seeded per
    ``(seed, description)``), or when the true label is not listed, a word of the
    description instead (``Sweden``, ``fungi``), which the labelling cell maps to
    ``unknown``. So the printed counts of the teacher's data show ``unknown`` as inference
    does, and the compute step that follows must leave it out.

    Args:
        seed: the rollout's seed (e.g. ``"task-id:sample"``): another sample, other replies.
        truth: the true label of a description (default: the generator's own,
            :func:`oracle_labeller`'s WordNet map); ``"unknown"`` when it has none.
        off_list: share of descriptions answered off the list, within 0..1.

    Raises:
        ValueError: ``off_list`` is not within 0..1.
    """

    def __init__(
        self,
        seed: str,
        truth: Any = None,
        off_list: float = OFF_LIST_SHARE,
    ) -> None:
        if not 0.0 <= off_list <= 1.0:
            raise ValueError(f"off_list must be within 0..1, not {off_list}")
        self.seed = seed
        self.truth = truth
        self.off_list = off_list

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        prompt = _last_user(messages)
        desc = prompt.rsplit("Description:", 1)[-1].strip()
        listed = re.search(r"belong to: ([^?\n]+)\?", prompt)
        categories = [c.strip().lower() for c in listed.group(1).split(",")] if listed else []
        if self.truth is None:
            label = oracle_labeller(messages)
        else:
            label = str(self.truth(desc) or "unknown")
        rng = random.Random(f"{self.seed}:{desc}")
        if label in categories and rng.random() >= self.off_list:
            form = rng.choice(_FORMS)
            return form.format(label=label, Label=label.capitalize(), LABEL=label.upper())
        words = [w.strip(".,;:()'\"") for w in desc.split()]
        words = [w for w in words if len(w) > 3 and not any(c in w.lower() for c in categories)]
        return rng.choice(words) if words else "Other"


def _last_user(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            return str(m.get("content") or "")
    return ""
