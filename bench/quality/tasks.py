"""The task record and the on-disk task set, so any system can be scored on the same tasks.

A task set is a folder::

    manifest.json          suite, seed, sources (with sha256), tokenizer, interpreter, counts
    tasks.jsonl            one Task per line (question, gold answer, metric, context_ref...)
    contexts/<name>.txt    a text context (S-NIAH haystack, OOLONG window)
    contexts/<name>/...    a codebase context: real files, relative paths as in the task

Tasks may share a context (several questions over one window). ``context_sha256`` is the
hash of the text file, or of the sorted ``path\\0text\\0`` records of a codebase.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.quality.scoring import Score, score_answer

Counter = Any  # Callable[[str], int]: tokens of a text


@dataclass
class Task:
    """One question with a known answer.

    Attributes:
        id: unique in its set (``"sniah-0001"``).
        family: ``sniah | oolong | pairs | codeqa``.
        question: the text every system is asked, verbatim.
        answer: the gold answer (str, number, list of str, list of [a, b]).
        metric: see :mod:`bench.quality.scoring`.
        context_ref: the context's path relative to the set folder.
        context_kind: ``text`` or ``codebase``.
        length_tokens: the context's size in the set's tokenizer.
        length_chars: its size in characters.
        context_sha256: see the module docstring.
        choices / unique_basename: scoring options (see :func:`bench.quality.scoring.score_answer`).
        params: how it was made (template, depth, label mix...), for the report.
    """

    id: str
    family: str
    question: str
    answer: Any
    metric: str
    context_ref: str
    context_kind: str
    length_tokens: int
    length_chars: int
    context_sha256: str = ""
    choices: list[str] | None = None
    unique_basename: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    def score(self, answer: str | None) -> Score:
        return score_answer(
            answer,
            self.answer,
            self.metric,
            choices=self.choices,
            unique_basename=self.unique_basename,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def files_sha256(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode("utf-8") + b"\0")
    return h.hexdigest()


def render_codebase(files: dict[str, str]) -> str:
    """A codebase as one text, the way the plain-model baseline gets it."""
    return "".join(f"### file: {path}\n{text}\n" for path, text in sorted(files.items()))


class TaskSet:
    """A task set folder being written or read (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.tasks: list[Task] = []
        self.manifest: dict[str, Any] = {}
        self._contexts: dict[str, Any] = {}

    # -- writing --------------------------------------------------------------------------
    def add_text_context(self, name: str, text: str) -> tuple[str, str]:
        """Write a text context once; returns ``(context_ref, sha256)``."""
        ref = f"contexts/{name}.txt"
        path = self.root / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self._contexts[ref] = text
        return ref, text_sha256(text)

    def add_codebase_context(self, name: str, files: dict[str, str]) -> tuple[str, str]:
        """Write a codebase context as real files once; returns ``(context_ref, sha256)``."""
        ref = f"contexts/{name}"
        base = self.root / ref
        for rel, text in files.items():
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self._contexts[ref] = dict(files)
        return ref, files_sha256(files)

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "tasks.jsonl", "w", encoding="utf-8") as f:
            for task in self.tasks:
                f.write(json.dumps(task.to_dict(), sort_keys=True) + "\n")
        manifest = dict(self.manifest)
        manifest["tasks"] = len(self.tasks)
        (self.root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))

    # -- reading --------------------------------------------------------------------------
    @classmethod
    def load(cls, root: Path) -> TaskSet:
        ts = cls(root)
        ts.manifest = json.loads((ts.root / "manifest.json").read_text())
        with open(ts.root / "tasks.jsonl", encoding="utf-8") as f:
            ts.tasks = [Task(**json.loads(line)) for line in f if line.strip()]
        return ts

    def context(self, task: Task) -> Any:
        """The context's value: a str, or ``{relative path: text}`` for a codebase."""
        ref = task.context_ref
        if ref not in self._contexts:
            path = self.root / ref
            if task.context_kind == "codebase":
                self._contexts[ref] = {
                    p.relative_to(path).as_posix(): p.read_text(encoding="utf-8")
                    for p in sorted(path.rglob("*"))
                    if p.is_file()
                }
            else:
                self._contexts[ref] = path.read_text(encoding="utf-8")
        return self._contexts[ref]

    def context_path(self, task: Task) -> Path:
        return self.root / task.context_ref

    def verify(self) -> list[str]:
        """Ids of tasks whose context no longer matches its recorded sha256."""
        bad = []
        for task in self.tasks:
            value = self.context(task)
            sha = files_sha256(value) if isinstance(value, dict) else text_sha256(value)
            if task.context_sha256 and sha != task.context_sha256:
                bad.append(task.id)
        return bad
