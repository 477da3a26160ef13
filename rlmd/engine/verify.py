"""The answer verifier: cheap checks of a ``FINAL`` answer against what the run has seen,
before the run ends ``completed``.

Each rule reads only the answer's form, the cell outputs and the context (and, for one rule,
which words the question holds: never its wording), and returns a :class:`Concern` with the evidence to show the model:

* **guess** (``verify_answer``'s original rule): a short literal answer that appears in no
  output so far;
* **empty**: an empty answer;
* **error**: an answer that reads like an error message, a "not found" or an empty result;
* **placeholder**: a literal answer that is one of the prompts' own example answers
  (``FINAL("the/path/you/found.py")``, :func:`rlmd.engine.prompts.example_answers`) and that
  no output showed: the example was copied, not an answer found. Its evidence, like the
  path rule's, names the codebase files the outputs did show (``lib/help.js:12``);
* **path**: a codebase answer naming a file that is not in the codebase;
* **empty-count**: a number computed by a cell whose search found nothing, or a 0 printed
  next to an empty collection;
* **restated**: an answer of several words that adds nothing to the question's own words
  but function words ("the class names that are declared with extends X" for "Which classes
  are declared with `extends X`? List the class names."): it describes the answer instead of
  giving it. The question is read only for this comparison, never for its wording;
* **failed-subcalls**: an answer computed from sub-call results that were mostly errors
  (``llm_map`` / ``llm_query_batched`` slots holding ``"Error: ..."``, a failed
  ``llm_query``; see :class:`SubcallTally`), or given after a cell whose output is mostly
  error lines.

The loop questions an answer once (:func:`rlmd.engine.feedback.judge_final`); an answer
accepted while a concern still holds is marked ``answer_source="unverified"`` so the user is
told, rather than ending ``completed`` in silence.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from rlmd.context import Context
from rlmd.engine import parsing, prompts

MAX_CHECKED_CHARS = 400
"""Longer answers are prose; only the empty and path rules apply to them."""

_ERRORISH = re.compile(
    r"^\s*(error|traceback|exception|warning)\b"
    r"|\b(not found|no such file|does not exist|doesn't exist|could not (find|locate)"
    r"|couldn't find|cannot find|can't find|unable to (find|locate|determine)"
    r"|no (files?|paths?|lines?|match(es)?|definitions?|results?|class(es)?|functions?)\b"
    r"|is not defined|not available|nameerror|keyerror|indexerror|filenotfounderror)",
    re.IGNORECASE,
)
_NOTHING = re.compile(r"^\s*(n/?a|unknown|\[\]|\{\}|set\(\)|\(\)|''|\"\")\s*\.?\s*$", re.I)
_NONE = re.compile(r"^\s*(none|null|nil)\s*\.?\s*$", re.I)
"""``None`` can be a real answer (a parameter's default): doubted only when no output
shows it."""
_NUMBER = re.compile(r"^\s*[-+]?\d[\d,_]*(\.\d+)?\s*$")
_EMPTY_NOTES = re.compile(
    r"no line matches|no path matches|is not used in|no definition of|no defined name contains"
    r"|derives from|no file '|is not in an indexed language|defines nothing"
)
"""The notes the codebase helpers print (stderr) when they come back empty."""
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
RESTATED_MIN_WORDS = 4
"""An answer is read as a restated question only with at least this many words (a class
name, a path or "None" is never one)."""
_VALUE = re.compile(r"\d|\w/\w|\w\.\w")
"""A digit, a path separator or a dotted name (``core.py``) inside a word: a value."""
_FUNCTION_WORDS = frozenset(
    "a an the that this these those which who whom whose what is are was were be been being "
    "of in on at to for with by from as and or it its they them their there here all any "
    "each every".split()
)
"""Words an answer may add to the question's and still say nothing new."""
_EMPTY_LITERAL = re.compile(r"(^|[\s=:(,])(\[\]|\{\}|set\(\)|Counter\(\)|\(\))\s*$", re.M)

_PATH = re.compile(
    r"(?<![\w/.\-])((?:[\w.\-]+/)*[\w\-][\w.\-]*\.([A-Za-z][A-Za-z0-9]{0,7}))(?![\w/])"
)
_EXAMPLE_ANSWERS = prompts.example_answers()
MAX_SHOWN_PATHS = 5
"""Files of the codebase the outputs named, shown with a questioned path or placeholder."""
_LINE_NO = re.compile(r":(\d+)")

_CODE_EXTS = frozenset(
    "py pyi js mjs cjs jsx ts tsx go rs java c h cc cpp cxx hh hpp rb php cs kt swift scala "
    "sh md rst txt toml json yaml yml cfg ini html css sql xml lock".split()
)


_ERROR_LINE = re.compile(
    r"""^\s*[\[(,'"]*\s*(error\b|traceback \(|[A-Za-z_.]*(error|exception):)""", re.I
)
"""A line that reports a failure: ``Error: ...``, ``'Error: ...``, ``Traceback (...``,
``ValueError: ...``, ``mod.SomeException: ...``."""
MIN_ERROR_LINES = 3
"""An output is "mostly error lines" with at least this many of them, and more than half of
its non-empty lines."""


@dataclass(frozen=True)
class Concern:
    """Why an answer is doubted: ``rule`` (``"guess" | "empty" | "error" | "placeholder" |
    "restated" | "path" | "empty-count" | "failed-subcalls"``) and ``evidence``, a sentence
    for the model and the user."""

    rule: str
    evidence: str


@dataclass
class SubcallTally:
    """The sub-call results one cell's code got back: ``results`` slots (one per
    ``llm_query``, per batched prompt, per ``llm_map`` item, per ``rlm_query``), of which
    ``failed`` were errors (an ``"Error: ..."`` slot or a call that raised); ``example`` is
    the first error's text."""

    results: int = 0
    failed: int = 0
    example: str = ""

    def add(self, answers: list[str]) -> None:
        """Count the slots of one call's answers (``"Error: ..."`` ones as failed)."""
        for a in answers:
            if isinstance(a, str) and a.startswith("Error:"):
                self.fail(a)
            else:
                self.results += 1

    def fail(self, error: str) -> None:
        """Count one failed call (a ``CallError``'s message, or an error slot)."""
        self.results += 1
        self.failed += 1
        self.example = self.example or error

    @property
    def mostly_failed(self) -> bool:
        """More than half of the results were errors."""
        return self.failed > 0 and 2 * self.failed > self.results


def check(
    answer: str,
    *,
    context: Context,
    outputs: list[str],
    stderr: str = "",
    literal: bool = True,
    subcalls: SubcallTally | None = None,
    question: str = "",
) -> Concern | None:
    """The first concern about ``answer``, or ``None`` when no rule doubts it.

    Args:
        answer: the FINAL answer text.
        context: the run's context (a codebase's file names check path answers).
        outputs: every cell's output so far (stdout, stderr, error), the answering cell's
            last.
        stderr: the answering cell's stderr (the helpers' "found nothing" notes).
        literal: the answer was written as a literal in FINAL (the guess rule applies).
        subcalls: the sub-call results the answer most likely rests on (the answering
            cell's, else those of the last cell that made sub-calls), or ``None``.
        question: the run's question (the restated rule; ``""``: not applied).
    """
    text = answer.strip().strip("`").strip()
    if not text:
        return Concern("empty", "the answer is empty")
    short = len(text) <= MAX_CHECKED_CHARS
    nothing = _NOTHING.match(text) or (
        _NONE.match(text) and not parsing.answer_in_outputs(text, outputs)
    )
    if short and (_ERRORISH.search(text) or nothing):
        return Concern(
            "error",
            "it reads like an error message or an empty/failed search, not an answer; "
            "a search that found nothing means the search was wrong, not that the answer "
            "is 'not found'",
        )
    if (
        literal
        and text.lower() in _EXAMPLE_ANSWERS
        and not parsing.answer_in_outputs(text, outputs)
    ):
        return Concern(
            "placeholder",
            f"it is the example answer of my instructions (FINAL({text!r})), copied: no "
            "output showed it, and the example only shows how to call FINAL"
            + _printed_paths_note(outputs, context),
        )
    if short and restates(text, question):
        return Concern(
            "restated",
            "it repeats the question's own words and adds nothing to them: it describes the "
            "answer instead of giving it; answer with the thing itself (the names, path, "
            "number or value) that an output shows",
        )
    if context.is_codebase:
        missing = _missing_paths(text if short else "", context)
        if missing:
            return Concern("path", missing + _printed_paths_note(outputs, context))
    failed = _failed_work(outputs, subcalls)
    if failed:
        return Concern("failed-subcalls", failed)
    if short and _NUMBER.match(text):
        # the last two outputs that show anything: a FINAL cell prints nothing, and the
        # evidence must not slide out of view when the model answers again (issue 15 run)
        recent = "\n".join([o for o in outputs if o.strip()][-2:])
        if _EMPTY_NOTES.search(stderr):
            note = next(line for line in stderr.splitlines() if _EMPTY_NOTES.search(line))
            return Concern(
                "empty-count",
                f"the number was computed by a cell whose search found nothing ({note.strip()}); "
                "a count over an empty result is not evidence",
            )
        if _is_zero(text) and _EMPTY_LITERAL.search(recent):
            return Concern(
                "empty-count",
                "0 was computed from an empty collection (the output shows an empty result); "
                "check that the search or filter matches anything at all",
            )
    if (
        literal
        and parsing.is_short_answer(answer)
        and not parsing.answer_in_outputs(answer, outputs)
    ):
        return Concern("guess", "it appears in no output so far, so it may be a guess")
    return None


def _failed_work(outputs: list[str], subcalls: SubcallTally | None) -> str | None:
    """The evidence that the answer was computed from failures: sub-call results that were
    mostly errors, or a recent output (the last two that show anything) that is mostly error
    lines; else ``None``."""
    if subcalls is not None and subcalls.mostly_failed:
        return (
            f"{subcalls.failed} of the {subcalls.results} sub-call results it was computed "
            f"from were errors (the first: {subcalls.example[:160]!r}); an answer computed "
            "from failed sub-calls is not evidence: run the failed items again (fewer at a "
            "time, or with shorter prompts) and check that most results are real answers"
        )
    for out in [o for o in outputs if o.strip()][-2:]:
        lines = [line for line in out.splitlines() if line.strip()]
        errors = [line for line in lines if _ERROR_LINE.match(line)]
        if len(errors) >= MIN_ERROR_LINES and 2 * len(errors) > len(lines):
            return (
                f"{len(errors)} of the {len(lines)} lines of a recent output are errors "
                f"(the first: {errors[0].strip()[:160]!r}); an answer computed from failures "
                "is not evidence: fix the cause and run it again"
            )
    return None


def restates(answer: str, question: str) -> bool:
    """Whether ``answer`` (at least :data:`RESTATED_MIN_WORDS` words, two of them function
    words: a sentence, with no number or path in it) holds no word that is not in
    ``question`` or a function word
    (:data:`_FUNCTION_WORDS`): compared as lowercase words, punctuation and backticks
    ignored."""
    words = [w.lower() for w in _WORD.findall(answer)]
    if len(words) < RESTATED_MIN_WORDS or not question:
        return False
    # a number or a path is a value given, even when the question names it ("Is the helper
    # in pkg/core.py?" → "The helper is defined in pkg/core.py:5"): the clean-clone CI's
    # scripted questions, which hold their answers, were questioned and lost them
    if _VALUE.search(answer):
        return False
    # a sentence, not a list of names picked from the question ("A, B, C and D")
    if sum(w in _FUNCTION_WORDS for w in words) < 2:
        return False
    asked = {w.lower() for w in _WORD.findall(question)}
    return all(w in asked or w in _FUNCTION_WORDS for w in words)


def _is_zero(text: str) -> bool:
    try:
        return float(text.replace(",", "").replace("_", "")) == 0
    except ValueError:
        return False


def printed_paths(outputs: list[str], context: Context, most: int = MAX_SHOWN_PATHS) -> list[str]:
    """The files of a codebase ``context`` that ``outputs`` named, in the order first named,
    each with the first line number an output gave it (``"lib/help.js:12"``), at most
    ``most``; ``[]`` for other contexts. A path is a codebase file, or the unique file it is
    the end of; other path-like words are left out."""
    if not context.is_codebase:
        return []
    files: dict[str, str] = context.value
    found: dict[str, str] = {}
    for out in outputs:
        for m in _PATH.finditer(out):
            path = _file_of(m.group(1), files)
            if path is None:
                continue
            line = _LINE_NO.match(out, m.end())
            if path not in found or (line and found[path] == path):
                if path not in found and len(found) >= most:
                    continue
                found[path] = f"{path}:{line.group(1)}" if line else path
    return list(found.values())


def _file_of(cand: str, files: dict[str, str]) -> str | None:
    """The codebase file ``cand`` names (itself, or the one file it is the end of)."""
    while cand.startswith("./"):
        cand = cand[2:]
    if cand in files:
        return cand
    ends = [p for p in files if p.endswith("/" + cand)]
    return ends[0] if len(ends) == 1 else None


def _printed_paths_note(outputs: list[str], context: Context) -> str:
    """``"; the outputs so far name these files: a.py:3, b.py"``, or ``""``: the evidence
    the run already has, shown when a path answer names no file or copies the example."""
    paths = printed_paths(outputs, context)
    return f"; the outputs so far name these files: {', '.join(paths)}" if paths else ""


def _missing_paths(text: str, context: Context) -> str | None:
    """A sentence naming the path-like words of ``text`` that name no file of the codebase
    (with close matches), or ``None``."""
    files: dict[str, str] = context.value
    prefix = (context.source or "").rstrip("/") + "/"
    missing = []
    for m in _PATH.finditer(text):
        cand, ext = m.group(1), m.group(2).lower()
        if "/" not in cand and ext not in _CODE_EXTS:
            continue  # json.dumps, os.path, v1.2: not file names
        if cand.startswith(prefix):
            cand = cand[len(prefix) :]
        while cand.startswith("./"):  # not lstrip("./"): that also ate a dot folder's dot
            cand = cand[2:]
        if cand in files or any(p.endswith("/" + cand) for p in files):
            continue
        missing.append(cand)
    if not missing:
        return None
    shown = missing[0]
    base = shown.rpartition("/")[2]
    close = [p for p in files if p.rpartition("/")[2] == base][:5] or difflib.get_close_matches(
        shown, list(files), n=3, cutoff=0.6
    )
    hint = f"; files with a similar name: {', '.join(close)}" if close else ""
    return f"no file {shown!r} exists in the codebase ({len(files):,} files){hint}"
