"""The prompts rlmd sends: system prompt, context metadata, per-turn feedback.

Written for small local models as much as for frontier ones: short, explicit rules, one
example, answers only through ``FINAL``. No prompt shows a bare ``FINAL(answer)``: small
models copy it literally and raise ``NameError`` (14 of 37 cells in the first quality run,
``bench/RESULTS.md``); the examples hand over a value or a variable the example set. The loop design follows Zhang, Kraska, Khattab,
*Recursive Language Models* (arXiv:2512.24601); the wording is our own.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rlmd.context import ContextMeta
from rlmd.sandbox.base import CellResult

SYSTEM_PROMPT = """\
You answer a question about an input that is too large to read at once. The input is stored \
in a Python REPL as the variable `context`. You never see it directly: you write Python code \
in a ```repl block, I run it and show you what it printed. Work step by step.

The REPL gives you:
- `context`: {context_line}
- `llm_query(prompt, model=None) -> str`: ask a sub-model one question; put the text it \
needs INTO the prompt (it cannot see `context`). Its window is about {sub_window:,} tokens.
- `llm_query_batched(prompts, model=None) -> list[str]`: many llm_query calls at once; a failed \
prompt gives an "Error: ..." string in its slot.
- `llm_map(instruction, items, model=None, items_per_call=1) -> list[str]`: ask the sub-model \
`instruction` about EACH item (calls run in parallel); one answer per item, in order; a failed \
item gives an "Error: ..." string in its slot.
- `rlm_query(prompt, context=None, model=None) -> str`: give a subtask to a child RLM that has \
its own REPL with `context` set to the value you pass; use it for pieces that need several steps.
- `rlm_query_batched(prompts, contexts=None, model=None) -> list[str]`.
- `SHOW_VARS()`: list the variables you have made.
- `FINAL(value)`: end the task; `value` is the answer itself, e.g. `FINAL("1932")`, or a variable your code set, e.g. `FINAL(total)`. `FINAL_VAR("total")` answers with that variable.
{extra_helpers}
Choose the tool by the kind of step:
- Exact facts (where a name is defined, a count, a list of names, a value): code and the \
helpers above. Never ask a sub-model to count or look up.
- A judgement about each of many items (its kind, topic, tone) that no keyword decides: \
`llm_map(instruction, items)`, then combine its answers with code.
- A sub-question that needs its own exploration of one part (several searches or reads): \
a child run with its own REPL over that part, e.g. {child_example}.

Rules:
1. Look at `context` with code before you answer. Never guess.
2. Print only what you need: each block's output is cut to {output_cap:,} characters. A block may run {cell_limit} of its own time (waiting on llm_query, llm_map or rlm_query is not counted); past that it is interrupted.
3. Do not assign to `context` or to the functions above; store results in new variables.
4. Write ONE ```repl block per reply and stop there: my next message shows its real output. Never write the output yourself.
5. When the output shows the answer, reply with a ```repl block that calls FINAL(...) with it.

Example, first a look:
```repl
{example}
```
{example_middle}then, in a later turn, once the output shows the answer:
```repl
{example_final}
```
"""

CODEBASE_HELPERS = """\
- `list_files(pattern=None) -> list[str]`: file paths, optionally filtered by a glob; \
e.g. `len(list_files("*.py"))` counts Python files.
- `read_file(path, start=1, end=None) -> str`: a file's lines with line numbers; \
e.g. `print(read_file("pkg/mod.py", 1, 40))`.
- `grep(pattern, path_glob=None, max_results=200, ignore_case=False) -> list[str]`: regex search \
over ALL files in one call; each hit is "path:line:text"; e.g. `grep(r"TODO")`.
- `find_definition(name) -> list[str]`: where a class, function, method or constant is \
defined ("Foo", "Foo.bar" or "module.func"); each hit is "path:line: kind name: signature".
- `find_references(name, path_glob=None, max_results=200) -> list[str]`: the lines that use \
a name ("path:line:text"), its definitions left out.
- `find_subclasses(name, recursive=True) -> list[str]`: classes deriving from a class.
- `outline(path) -> list[str]`: a file's definitions with line numbers.
- `search_symbols(query, kind=None) -> list[str]`: definitions whose name contains `query`.
These search the WHOLE codebase: never guess a path.
"""

EXAMPLES = {
    "codebase": (
        "print(len(context))\nprint(list_files()[:20])",
        'FINAL("the/path/you/found.py")',
    ),
    "codebase_search": (
        "print(find_definition({term!r}))\nprint(find_references({term!r})[:20])",
        'FINAL("the/path/you/found.py")',
    ),
    "text": ("print(len(context))\nprint(context[:500])", "FINAL(result)"),
    "text_search": (
        "print(len(context))\n"
        "lines = context.splitlines()\n"
        "print(len(lines), lines[:2])\n"
        "# search ALL lines for a word of the question, not just the start\n"
        "hits = [line for line in lines if {term!r} in line.lower()]\n"
        "print(len(hits), hits[:10])",
        "FINAL(hits[0])",
    ),
    "lines": (
        "lines = [line for line in context.splitlines() if line.strip()]\nprint(len(lines), lines[:3])",
        "FINAL(count)",
    ),
    "list": ("print(len(context))\nprint(context[:3])", "FINAL(len(context))"),
    "dict": ("print(len(context))\nprint(list(context)[:20])", "FINAL(len(context))"),
}
"""Per context kind: a first cell that looks, and a last cell that answers. The ``*_search``
forms, used when the question has a distinctive word (:func:`search_term`), search the whole
input for it: the first quality run's model copied the example cell every time, and with
``print(context[:500])`` it answered from those 500 characters (``bench/RESULTS.md``); with
a fixed search word it searched for that word (trajectory ``61798a7c0344c30f49a7``). No
last cell is a bare ``FINAL(answer)``. ``lines`` is for a text of many short lines (items,
records: :func:`is_line_items`): copying a keyword search there answered a per-item
judgement by counting keyword hits (issue 15's run), so its example looks, then shows both
next steps (:data:`MIDDLE`)."""

MIDDLE = {
    "codebase": (
        "(with a path it printed, `outline(path)` lists that file's classes and methods; "
        "`find_subclasses(name)` lists a class's subclasses), "
    ),
    "lines": (
        "then, if each line needs a judgement (its kind, topic or tone) that no keyword "
        "decides, ask the sub-model about every line and count with code:\n"
        "```repl\n"
        'answers = llm_map("Does this line describe a vehicle? Answer yes or no.", lines)\n'
        'count = sum(a.strip().lower().startswith("yes") for a in answers)\n'
        "print(count)\n"
        "```\n"
        "(if a word or number decides it, filter `lines` with code instead), "
    ),
}
"""Per example kind, the text between the example's first and last cell: the next step a
kind of question needs (code-intelligence helpers; ``llm_map`` for per-item judgement)."""

CHILD_EXAMPLES = {
    "codebase": (
        '`rlm_query("How does pkg/ handle errors?", '
        'context={p: t for p, t in context.items() if p.startswith("pkg/")})`'
    ),
    "text": ('`rlm_query("What does this section decide?", context=context[start:end])`'),
    "lines": ('`rlm_query("Summarise these records.", context="\\n".join(lines[start:end]))`'),
    "list": '`rlm_query("What does this item describe?", context=context[i])`',
    "dict": '`rlm_query("What does this entry describe?", context=context[key])`',
}
"""Per example kind (the input's shape), how a child run gets its part of the input:
``rlm_query(question, context=part)`` with the part written for that shape. Fixed
questions, never the run's."""

LINE_ITEMS_MIN = 10
LINE_ITEMS_MAX_CHARS = 300
"""A text is "line items" (:func:`is_line_items`) with at least this many lines of at most
this many characters on average."""


def is_line_items(meta: ContextMeta) -> bool:
    """Whether a text context is many short lines (a list of items, records, messages):
    decided from its shape only, never from the question."""
    lines = meta.get("lines") or 0
    return (
        meta["kind"] == "text"
        and lines >= LINE_ITEMS_MIN
        and meta["chars"] / lines <= LINE_ITEMS_MAX_CHARS
    )


_STOPWORDS = frozenset(
    "about above after again against also answer because been before being below between "
    "both could does doing down during each file files from further give have having here "
    "into itself just more most much only other over please same should some such than that "
    "their them then there these they this those through under until very what when where "
    "which while whom whose will with would your codebase context text input question".split()
)


def search_term(question: str) -> str | None:
    """The most distinctive word of ``question`` to search the input for, or ``None``.

    First a backquoted name (```StreamReader```); else the longest word that looks like an
    identifier or key (has ``_``, ``-``, a digit or an inner capital); else the longest word
    of 5+ letters that is not a common English or question word. Generic: it reads only
    the question's form, never the task.
    """
    quoted = re.findall(r"`([A-Za-z_][\w.-]{2,})`", question)
    if quoted:
        return quoted[0]
    words = re.findall(r"[A-Za-z_][\w-]*\w", question)
    marked = [w for w in words if re.search(r"[_\-0-9]|[a-z][A-Z]", w)]
    if marked:
        return max(marked, key=len)
    plain = [w for w in words if len(w) >= 5 and w.lower() not in _STOPWORDS]
    return max(plain, key=len) if plain else None


def context_line(meta: ContextMeta) -> str:
    kind = meta["kind"]
    size = f"{meta['chars']:,} characters, about {meta['tokens']:,} tokens"
    if kind == "codebase":
        return f"a codebase: a dict of {meta['files']:,} files {{relative path: text}} ({size})."
    if kind == "list":
        return f"a list of {meta.get('items', 0):,} items ({size})."
    if kind == "dict":
        return f"a dict of {meta.get('items', 0):,} entries ({size})."
    return f"a string ({size})."


def example_cells(kind: str, question: str | None = None) -> tuple[str, str]:
    """The example's first (looking) and last (answering) cell for an example ``kind`` (a
    context kind, or ``"lines"``); for text and codebases, a search for :func:`search_term`
    of ``question`` when it has one."""
    term = search_term(question) if question else None
    if term and kind in ("text", "codebase"):
        first, last = EXAMPLES[f"{kind}_search"]
        return first.format(term=term.lower() if kind == "text" else term), last
    return EXAMPLES.get(kind, EXAMPLES["text"])


def example_middle(kind: str) -> str:
    """The example's text between its first and last cell (:data:`MIDDLE`), ``""`` if none."""
    return MIDDLE.get(kind, "")


def system_prompt(
    meta: ContextMeta,
    *,
    sub_window: int,
    output_cap: int,
    tools: dict[str, str],
    template: str | None = None,
    question: str | None = None,
    cell_limit_s: float = 120.0,
) -> str:
    """The root model's system prompt.

    Args:
        meta: context metadata from :meth:`rlmd.context.Context.metadata`.
        sub_window: the sub-model's context window, tokens.
        output_cap: characters of each cell's output the model is shown.
        tools: user tool names → one-line descriptions.
        template: a custom template with the same ``{placeholders}``.
        question: the run's question; its :func:`search_term` goes into the example.
        cell_limit_s: a cell's own time limit, seconds (see :mod:`rlmd.sandbox.clock`).
    """
    extra = CODEBASE_HELPERS if meta["kind"] == "codebase" else ""
    for name, doc in tools.items():
        extra += f"- `{name}`: {doc}\n"
    kind = "lines" if is_line_items(meta) else meta["kind"]
    example, example_final = example_cells(kind, question)
    return (template or SYSTEM_PROMPT).format(
        example_middle=example_middle(kind),
        child_example=CHILD_EXAMPLES.get(kind, CHILD_EXAMPLES["text"]),
        context_line=context_line(meta),
        sub_window=sub_window,
        extra_helpers=extra,
        output_cap=output_cap,
        example=example,
        example_final=example_final,
        cell_limit=_seconds(cell_limit_s),
    )


def _seconds(value: float) -> str:
    """``"2 minutes"``, ``"90 seconds"``."""
    if value >= 60 and value % 60 == 0:
        minutes = int(value // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{value:g} seconds"


def describe_context(meta: ContextMeta) -> str:
    """The context's metadata as plain sentences. Deliberately not a dict literal: small
    models read ``{"files": 33}`` as keys of ``context`` and write ``context['files']``."""
    size = f"{meta['chars']:,} characters, about {meta['tokens']:,} tokens"
    kind = meta["kind"]
    if kind == "codebase":
        text = (
            f"`context` is a dict that maps each of the {meta['files']:,} file paths of a "
            f"codebase (like {meta.get('example_path') or 'src/main.py'!r}) to that file's text ({size} in all)."
        )
        skipped = ", ".join(f"{n} {why}" for why, n in (meta.get("skipped") or {}).items())
        if skipped:
            text += f" Files skipped while loading: {skipped}."
        return text
    if kind == "list":
        lengths = ", ".join(str(x) for x in meta.get("item_chars", []))
        return f"`context` is a list of {meta['items']:,} items ({size}); item lengths in characters: {lengths}."
    if kind == "dict":
        keys = ", ".join(repr(k) for k in meta.get("keys", []))
        more = " ..." if meta["items"] > len(meta.get("keys", [])) else ""
        return f"`context` is a dict with {meta['items']:,} keys ({size}); its keys: {keys}{more}."
    lines = meta.get("lines")
    return f"`context` is a string of {size}" + (f", {lines:,} lines." if lines else ".")


def map_ready_note(code_map: list[str]) -> str:
    """The note added to a later turn when the codebase's map was not ready for the first
    one (its symbol index was still being built)."""
    return "\n".join(
        ["The code map is ready now (from the symbol index):", *("  " + t for t in code_map)]
    )


def first_user_message(question: str, meta: ContextMeta) -> str:
    """The opening user turn: the question plus the context's metadata (never its content)."""
    lines = [f"Question: {question}", "", f"About `context`: {describe_context(meta)}"]
    if meta.get("tree"):
        lines += ["Folders and files in it:", *("  " + t for t in meta["tree"])]
    if meta.get("map"):
        lines += ["Code map (from the symbol index):", *("  " + t for t in meta["map"])]
    lines.append("")
    if meta["kind"] == "codebase":
        lines.append(
            "Start in a ```repl block with the symbol helpers, e.g. find_definition(name) or "
            "find_references(name); grep(pattern) searches the text of every file."
        )
    elif is_line_items(meta) or meta["kind"] == "list":
        what = "line" if meta["kind"] == "text" else "item"
        lines.append(
            f"Start by looking at `context` in a ```repl block. If the question needs a "
            f"judgement about each {what} (its kind, topic or tone), use llm_map over the "
            f"{what}s and count its answers with code."
        )
    else:
        lines.append("Start by looking at `context` in a ```repl block.")
    return "\n".join(lines)


REPEATED = (
    "You ran the same code as in your previous turn and got the same result. If that result "
    "answers the question, call FINAL(...) with the answer itself in a ```repl block now; "
    "otherwise try something different."
)

REPEATED_NOT_RUN = (
    "You sent the same code a third time in a row, so I did not run it again: its output is "
    "in my earlier messages and would be the same. Read that output: if it holds what the "
    "question asks, compute the answer from it with new code (count, filter, pick) or call "
    "FINAL(...) with it; otherwise search another way."
)

FINAL_NAME_ERROR = (
    "Your FINAL(...) named `{name}`, which is not defined, so nothing was answered. Put the "
    'value itself in FINAL, e.g. FINAL("the text you found") or FINAL(42), or the name of a '
    'variable an earlier cell set, e.g. FINAL(result) or FINAL_VAR("result").'
)

FOLDED_RAISED = (
    "I took your last cell and its traceback out of this conversation: do not send it "
    "again; write a different cell. It raised {error}"
)

FOLDED_VARIABLES = "Before it raised, that cell set: {names}."

FOLDED_PRINTED = "Your last cell printed this before it raised:\n{output}"
"""Kept in a fold's note: what a raised cell printed (search hits, say) is what it found;
only its code and traceback leave the model's view."""

FOLDED_REPEAT = (
    "You sent the same code again and it printed the same output as before (above), so I "
    "took the repeat out of this conversation. If that output answers the question, call "
    "FINAL(...) with the answer itself in a ```repl block; otherwise try something different."
)

FINAL_RAISED = (
    "Your FINAL(...) raised {error}, so nothing was answered. Print the value first and check "
    "that it holds the answer; if a search found nothing, try other words of the question or "
    "a looser pattern."
)

UNVERIFIED_ANSWER = (
    "Your answer {answer!r} was not accepted yet: it appears in no output so far, so it may "
    "be a guess. Print the evidence with code in a ```repl block (the line or value you found "
    "in `context`), then call FINAL(...) again."
)

QUESTIONED_ANSWER = (
    "Your answer {answer!r} was not accepted yet: {evidence}. Check it with code in a "
    "```repl block (search the whole input another way, print what you find), then call "
    "FINAL(...) with the answer the output supports. An answer given again unchanged "
    "without new evidence is reported to the user as unverified."
)

GREP_ALL_HINT = (
    "Hint: that grep searched only the files you named and found nothing. Leave the path out, "
    "grep(pattern), to search every file in one call."
)

CODEBASE_KEY_HINT = (
    "Hint: the keys of `context` are file paths such as {example!r}; list_files() shows them "
    "all and grep(pattern) searches every file."
)


def printed(result: CellResult) -> str:
    """What a cell printed: its stdout, then its stderr under a ``[stderr]`` line."""
    out = result.stdout
    if result.stderr:
        out += ("\n" if out else "") + "[stderr]\n" + result.stderr
    return out


def cell_feedback(
    index: int, code: str, result: CellResult, output_cap: int, cap: Callable[[str, int], str]
) -> str:
    """What the model is told about one executed cell (output capped by ``cap``)."""
    parts = [f"[cell {index + 1}]"]
    out = printed(result)
    parts.append(cap(out, output_cap) if out.strip() else "(no output)")
    if result.error:
        parts.append(cap(result.error, max(output_cap // 2, 500)))
    if result.kernel_restarted and not result.timed_out:
        lost = ", ".join(result.lost_variables) or "none"
        parts.append(f"The REPL process died and was restarted; variables lost: {lost}.")
    if result.variables:
        shown = ", ".join(
            f"{v.name} ({v.type}{'' if v.size is None else f', len {v.size:,}'})"
            for v in result.variables[:30]
        )
        parts.append(f"Variables set: {shown}")
    if result.restored:
        parts.append(
            "Restored reserved names you overwrote: "
            + ", ".join(result.restored)
            + ". Store your values under other names."
        )
    return "\n".join(parts)


NO_CODE = (
    "I found no ```repl block in your reply, so nothing ran. Write Python code in a ```repl "
    "block to look at `context`, and call FINAL(...) with the answer in a ```repl block when "
    "you are done."
)

EARLY_ANSWER = (
    "Your answer was not accepted: no code has looked at `context` yet, so it would be a "
    "guess. First inspect `context` with code in a ```repl block, then call FINAL(...) with "
    "the answer."
)

NEXT_TURN = (
    "Turn {turn} of {max_turns}. If the output above answers the question, call FINAL(...) "
    "with the answer itself in a ```repl block now; otherwise continue."
)

NEXT_TURN_FOLDED = (
    "Turn {turn} of {max_turns}. If an output answers the question, call FINAL(...) with the "
    "answer itself in a ```repl block now; otherwise continue."
)
"""The turn note after a folded turn: the output of the cell that failed is no longer
above (only what the fold's note keeps), so :data:`NEXT_TURN`'s "If the output above
answers" would point at nothing. Otherwise the same words: a first wording ("Write your
next cell ...; once an output shows the answer, call FINAL(...) with the answer itself")
changed the 1.5B's greedy answer on held-out codeintel-006 from the class name to a
sentence restating the question (session 10, bench/RESULTS.md)."""

LAST_TURN = (
    "Turn {turn} of {max_turns} is your last. Reply with a ```repl block that calls FINAL(...) "
    "with your best answer from the outputs above."
)

LAST_TURN_FOLDED = (
    "Turn {turn} of {max_turns} is your last. Reply with a ```repl block that calls FINAL(...) "
    "with your best answer from the outputs so far."
)
"""The last turn's note after a folded turn: :data:`LAST_TURN` with "the outputs so far" for
"the outputs above" (the folded cell's output is not above; only what the fold's note keeps),
as :data:`NEXT_TURN_FOLDED` does for the other turns."""

_EXAMPLE_FINAL = re.compile(r'FINAL\((?:"([^"]+)"|(\d+))\)')


def example_answers() -> frozenset[str]:
    """The literal answers the prompts' own examples put in ``FINAL(...)`` (lower case):
    ``"the/path/you/found.py"``, ``"1932"``, ``"the text you found"``, ``"42"``. Read from the
    prompt texts, so it follows their wording. A model that answers one of them copied
    the example, not an output: the 1.5B answered ``FINAL("the/path/you/found.py")`` on
    held-out codeintel-007 (session 11), as the 0.5B did in issue 13's runs; the verifier's
    ``placeholder`` rule (:func:`rlmd.engine.verify.check`) questions it."""
    texts = [SYSTEM_PROMPT, FINAL_NAME_ERROR, *MIDDLE.values()]
    texts += [cell for cells in EXAMPLES.values() for cell in cells]
    return frozenset(
        (quoted or number).lower()
        for text in texts
        for quoted, number in _EXAMPLE_FINAL.findall(text)
    )


EXTRACTION_USER = (
    "Question: {question}\n\nWork so far: the conversation above. The task has stopped "
    "({reason}); no more code will run. From the outputs above, give the best answer you can "
    "justify. If they do not support an answer, say exactly what is known and that the "
    "answer is incomplete. Reply with the answer only, no code."
)
"""The extraction's last user message; it starts like the condensed-transcript form
(``Question: ...\n\nWork so far``), so scripts can recognise either."""

EXTRACTION_SYSTEM = (
    "A task stopped before it finished. From the work so far, give the best answer to the "
    "question you can justify. If the work does not support an answer, say exactly what is "
    "known and that the answer is incomplete. Reply with the answer only."
)

COMPACTION_SYSTEM = (
    "Summarise this work log of a program-writing assistant so it can continue: what it "
    "learned about the input, variables it created and what they hold, and what is left to "
    "do. Be concise and keep exact numbers, names and paths."
)
