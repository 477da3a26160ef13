"""Datasets from recorded rollouts: SFT samples (one per root turn) and GRPO groups.

SFT (``rlmd train export --format sft``), one JSON object per line, loadable with
``datasets.load_dataset("json", data_files=F)``::

    {"prompt": [{"role": "system" | "user" | "assistant", "content": str}, ...],
     "completion": [{"role": "assistant", "content": str}],
     "task_id", "family", "run_id", "rollout_set", "model", "depth", "turn", "reward",
     "fixes": [str], "repair": bool}

``prompt`` is exactly what the model was sent for that root turn (the store keeps whole
prompts of rollouts, ``RunConfig.record_prompts``); ``completion`` is the turn as the engine
kept it in the conversation (ended at its first code block, fence closed). Root turns of
child runs (``rlm_query``) are samples too, with their own prompts. Steps, in order:

1. **rollout filters**: reward ``>= min_reward`` (default: > 0), at least ``min_iterations``
   root turns (default 2: one-turn runs teach nothing about the loop), model, family, split;
2. **turn filters**: depth ``<= max_depth``, prompt + completion ``<= max_chars``;
   **mistakes are never targets** (unless ``keep_mistakes``): a root turn is a mistake when
   one of its cells raised or timed out, when its ``FINAL`` was not accepted (a cell set an
   answer but the run went on: the verifier questioned it or the engine refused it), or when
   the rollout's ``details["mistake_turns"]`` lists it (the programmatic teacher marks its
   deliberate mistakes there, also those the trajectory cannot show, such as a search that
   found nothing). A mistake stays in the prompts of the run's later turns, as the model saw
   it; the turn right after one is marked ``"repair": true``;
3. **template fixes** (:func:`fix_final`), each named in ``fixes``;
4. **dedupe** on (prompt, completion);
5. **repair up-weighting** (``repeat_repair`` N, ``--repeat-repair N``): each repair sample
   is written N times in all (the copies after every sample, in N - 1 passes over the
   repairs in order; identical records). Repairs are a small share of the data (18 of 141
   in the teacher's set), so a short run at batch 1 may see one or none of them; a trainer
   that shuffles (``rlmd train sft`` does) spreads the copies over the epoch.

The prompts are what the rollout recorded: rollouts fold failed turns as inference does
(:class:`rlmd.train.rollout.RolloutOptions` ``fold_failed_turns``), so after a turn that
raised a sample's prompt holds the engine's fold note (the exception line) where the
failed turn was, as the model sees it at inference; a rollout recorded without the fold
(``--no-fold``, or before session 10) shows the failed turn and its traceback instead.

GRPO (``--format grpo``): per task of a rollout set with two or more samples, the first
root turn's prompt (the same for every sample), each sample's first root turn and the
rollout's reward: ``{"prompt", "completions": [[message]], "rewards": [float], "task_id",
"run_ids"}``; groups whose rewards are all equal (zero advantage) are dropped unless asked.
:func:`why_no_groups` says in words why an export kept no group.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmd.engine import parsing
from rlmd.engine.feedback import normalise
from rlmd.store import Store


@dataclass
class ExportFilters:
    """Which rollouts and turns become samples (see the module docstring)."""

    min_reward: float = 1e-9
    min_iterations: int = 2
    max_depth: int = 1
    models: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    splits: tuple[str, ...] = ("train", "user")
    max_chars: int = 100_000
    rollout_sets: tuple[str, ...] = ()
    keep_mistakes: bool = False

    def __post_init__(self) -> None:
        """Raise ``ValueError`` for a count out of range (``max_depth`` -1 stopped the
        export with a zip error; ``max_chars`` 0 dropped every turn as too long)."""
        for name, least in (("max_depth", 0), ("min_iterations", 0), ("max_chars", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, not {value!r}")


@dataclass
class ExportReport:
    """Counts of one export: rollouts kept / dropped (by reason; turns dropped as
    ``too_long`` or ``mistake``), samples (copies included), of which ``repairs`` distinct
    ones follow a mistake and ``repair_copies`` are their extra copies, fixes by kind."""

    rollouts: int = 0
    dropped: Counter = field(default_factory=Counter)
    samples: int = 0
    duplicates: int = 0
    fixes: Counter = field(default_factory=Counter)
    repairs: int = 0
    repair_copies: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollouts": self.rollouts,
            "dropped": dict(self.dropped),
            "samples": self.samples,
            "duplicates": self.duplicates,
            "fixes": dict(self.fixes),
            "repairs": self.repairs,
            "repair_copies": self.repair_copies,
        }


_FINAL_VAR_BARE = re.compile(r"\bFINAL_VAR\(\s*([A-Za-z_]\w*)\s*\)")
_FINAL_STRING = re.compile(r"\bFINAL\(\s*(['\"])([A-Za-z_]\w*)\1\s*\)")


def _assigned_names(code: str) -> set[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    return {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


def fix_final(target: str, earlier_code: str) -> tuple[str, list[str]]:
    """Programmatic fixes of ``FINAL`` / ``FINAL_VAR`` misuse in one root turn.

    Args:
        target: the turn's text.
        earlier_code: the code of the run's earlier root turns (to know its variables).

    Returns:
        ``(fixed text, names of the fixes applied)``:

        * ``final_var_unquoted``: ``FINAL_VAR(total)`` → ``FINAL_VAR("total")`` (it takes a
          name; the kernel raises on a value);
        * ``final_of_name_string``: ``FINAL("total")`` where ``total`` is a variable the run
          assigned → ``FINAL(total)`` (the quotes answer with the word ``total``);
        * ``prose_final``: a turn with no code block whose prose says ``FINAL(...)`` →
          the same call in a ```repl block.
    """
    fixes: list[str] = []
    blocks = parsing.find_code_blocks(target)
    if not blocks:
        prose = parsing.find_prose_final(target)
        if prose:
            kind, value = prose
            call = f"FINAL_VAR({value!r})" if kind == "final_var" else f"FINAL({value!r})"
            return f"```repl\n{call}\n```", ["prose_final"]
        return target, fixes
    code = "\n".join(blocks)
    names = _assigned_names(earlier_code + "\n" + code)
    new = _FINAL_VAR_BARE.sub(lambda m: f'FINAL_VAR("{m.group(1)}")', target)
    if new != target:
        fixes.append("final_var_unquoted")
        target = new

    def unquote(m: re.Match[str]) -> str:
        return f"FINAL({m.group(2)})" if m.group(2) in names else m.group(0)

    new = _FINAL_STRING.sub(unquote, target)
    if new != target:
        fixes.append("final_of_name_string")
    return new, fixes


def kept_turn(response: str) -> str:
    """A root reply as the engine kept it in the conversation (see
    :meth:`rlmd.engine.loop.RLMRun._root_call`)."""
    return parsing.close_open_fence(parsing.cut_after_first_block(response))


def root_turns(store: Store, run_id: str, max_depth: int = 1) -> list[dict[str, Any]]:
    """The root turns of run ``run_id`` and of its child runs down to ``max_depth``:
    ``{"run_id", "depth", "turn", "prompt", "response", "raised", "answered"}``, in order
    (``raised``: a cell of the turn raised or timed out; ``answered``: a cell of the turn set
    a ``FINAL`` answer). Per iteration one root call counts, the one whose reply the engine
    kept (:func:`_kept_call`).

    Raises:
        ValueError: a root call's event holds no whole prompt (the run was not recorded with
            ``record_prompts``).
    """
    out: list[dict[str, Any]] = []
    pending = [store.tree(run_id)]
    while pending:
        run = pending.pop(0)
        if run["depth"] > max_depth:
            continue
        by_iteration: dict[str, list[dict[str, Any]]] = {}
        cells: dict[str, list[dict[str, Any]]] = {}
        stack = list(run["nodes"])
        flat = []
        while stack:
            node = stack.pop()
            flat.append(node)
            stack.extend(node["children"])
            pending.extend(node["runs"])
        pending.extend(run["runs"])
        for node in sorted(flat, key=lambda n: n["seq"]):
            data = node["data"]
            if node["kind"] == "model_call" and data.get("role") == "root":
                if data.get("response") is None:
                    continue
                by_iteration.setdefault(node["parent_id"] or node["id"], []).append(node)
            elif node["kind"] == "cell":
                cells.setdefault(node["parent_id"] or "", []).append(node)
        kept = {it: _kept_call(calls, cells.get(it, [])) for it, calls in by_iteration.items()}
        ordered = sorted(kept.items(), key=lambda kv: kv[1]["seq"])
        for turn, (iteration, node) in enumerate(ordered):
            messages = node["data"].get("messages") or []
            if not messages or messages[0].get("role") != "system":
                raise ValueError(
                    f"run {run['id']}: root call {node['id']} was recorded without its whole "
                    "prompt (record rollouts with `rlmd train rollout`)"
                )
            out.append(
                {
                    "run_id": run["id"],
                    "depth": run["depth"],
                    "turn": turn,
                    "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
                    "response": node["data"]["response"],
                    "raised": any(
                        c["status"] in ("error", "timeout") for c in cells.get(iteration, [])
                    ),
                    "answered": any(
                        c["data"].get("final") is not None for c in cells.get(iteration, [])
                    ),
                }
            )
    return out


def _kept_call(calls: list[dict[str, Any]], cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Of an iteration's root calls (in order), the one whose reply the engine kept: the
    last (it re-asks a turn whose stop string cut prose), unless the turn was re-sampled
    (calls with a ``sampling``, see :meth:`rlmd.engine.loop.RLMRun._resample`) and the
    last re-sample was refused: then the reply before the first re-sample. A re-sample was
    taken when its code is what the turn's first cell ran, or it has no code and a
    ``FINAL`` in prose."""
    first = next((i for i, c in enumerate(calls) if c["data"].get("sampling")), None)
    if first is None or first == 0:
        return calls[-1]
    reply = kept_turn(calls[-1]["data"]["response"])
    blocks = parsing.find_code_blocks(reply)
    if blocks and cells:
        taken = normalise(blocks[0]) == normalise(str(cells[0]["data"].get("code") or ""))
    else:
        taken = not blocks and parsing.find_prose_final(reply) is not None
    return calls[-1] if taken else calls[first - 1]


def sft_samples(
    store: Store, filters: ExportFilters | None = None, *, repeat_repair: int = 1
) -> tuple[list[dict[str, Any]], ExportReport]:
    """The SFT samples of the store's rollouts (see the module docstring); each repair
    sample ``repeat_repair`` times in all.

    Raises:
        ValueError: ``repeat_repair`` is less than 1.
    """
    if repeat_repair < 1:
        raise ValueError(f"repeat_repair must be 1 or more, not {repeat_repair}")
    f = filters or ExportFilters()
    report = ExportReport()
    samples: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in store.rollouts():
        reason = _rollout_dropped(row, f)
        if reason:
            report.dropped[reason] += 1
            continue
        turns = root_turns(store, row["run_id"], f.max_depth)
        if not turns:  # its run kept no root turns (imported without its nodes)
            report.dropped["no_turns"] += 1
            continue
        report.rollouts += 1
        earlier: dict[str, str] = {}
        marked = set((row.get("details") or {}).get("mistake_turns") or [])
        mistakes = [
            t["raised"]
            or (t["answered"] and nxt is not None and nxt["run_id"] == t["run_id"])
            or (t["run_id"] == row["run_id"] and t["turn"] in marked)
            for t, nxt in zip(turns, [*turns[1:], None], strict=True)
        ]
        for i, t in enumerate(turns):
            target = kept_turn(t["response"])
            target, fixes = fix_final(target, earlier.get(t["run_id"], ""))
            earlier[t["run_id"]] = (
                earlier.get(t["run_id"], "") + "\n" + "\n".join(parsing.find_code_blocks(target))
            )
            if mistakes[i] and not f.keep_mistakes:
                report.dropped["mistake"] += 1
                continue
            repair = i > 0 and mistakes[i - 1] and turns[i - 1]["run_id"] == t["run_id"]
            size = sum(len(m["content"]) for m in t["prompt"]) + len(target)
            if size > f.max_chars:
                report.dropped["too_long"] += 1
                continue
            key = hashlib.sha256(json.dumps([t["prompt"], target]).encode()).hexdigest()
            if key in seen:
                report.duplicates += 1
                continue
            seen.add(key)
            report.fixes.update(fixes)
            report.repairs += repair
            samples.append(
                {
                    "prompt": t["prompt"],
                    "completion": [{"role": "assistant", "content": target}],
                    "task_id": row["task_id"],
                    "family": row["family"],
                    "run_id": t["run_id"],
                    "rollout_set": row["rollout_set"],
                    "model": row["model"],
                    "depth": t["depth"],
                    "turn": t["turn"],
                    "reward": row["reward"],
                    "fixes": fixes,
                    "repair": repair,
                }
            )
    repairs = [s for s in samples if s["repair"]]
    copies = [dict(s) for _ in range(repeat_repair - 1) for s in repairs]
    samples += copies
    report.repair_copies = len(copies)
    report.samples = len(samples)
    return samples, report


def _rollout_dropped(row: dict[str, Any], f: ExportFilters) -> str | None:
    if f.rollout_sets and row["rollout_set"] not in f.rollout_sets:
        return "rollout_set"
    if f.splits and row["split"] not in f.splits:
        return "split"
    if f.models and row["model"] not in f.models:
        return "model"
    if f.families and row["family"] not in f.families:
        return "family"
    if row["reward"] < f.min_reward:
        return "reward"
    if row["iterations"] < f.min_iterations:
        return "iterations"
    return None


def grpo_groups(
    store: Store,
    filters: ExportFilters | None = None,
    *,
    keep_zero_advantage: bool = False,
    dropped: Counter | None = None,
) -> list[dict[str, Any]]:
    """GRPO groups (see the module docstring); ``filters.min_reward`` and
    ``min_iterations`` are not applied (a group needs its failures).

    Args:
        dropped: if given, counts what was left out, by reason: rollouts left out by a
            filter (``rollout_set``, ``split``, ``model``, ``family``, as in
            :class:`ExportReport`) and tasks whose group was dropped: ``one_sample`` (a
            group needs two samples or more), ``no_turns`` (a sample's run kept no root
            turn) and ``zero_advantage`` (all rewards equal, unless ``keep_zero_advantage``).

    Raises:
        ValueError: a filter count out of range (:class:`ExportFilters`), or a sample
            recorded without its whole prompt (:func:`root_turns`).
    """
    if dropped is None:
        dropped = Counter()
    f = filters or ExportFilters()
    loose = ExportFilters(
        min_reward=float("-inf"),
        min_iterations=0,
        models=f.models,
        families=f.families,
        splits=f.splits,
        rollout_sets=f.rollout_sets,
    )
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in store.rollouts():
        reason = _rollout_dropped(row, loose)
        if reason is None:
            groups.setdefault((row["rollout_set"], row["task_id"]), []).append(row)
        else:
            dropped[reason] += 1
    out = []
    for (_, task_id), rows in sorted(groups.items()):
        if len(rows) < 2:
            dropped["one_sample"] += 1
            continue
        firsts = [root_turns(store, r["run_id"], 0)[:1] for r in rows]
        if any(not t for t in firsts):
            dropped["no_turns"] += 1
            continue
        rewards = [r["reward"] for r in rows]
        if not keep_zero_advantage and len(set(rewards)) == 1:
            dropped["zero_advantage"] += 1
            continue
        out.append(
            {
                "prompt": firsts[0][0]["prompt"],
                "completions": [
                    [{"role": "assistant", "content": kept_turn(t[0]["response"])}] for t in firsts
                ],
                "rewards": rewards,
                "task_id": task_id,
                "run_ids": [r["run_id"] for r in rows],
            }
        )
    return out


_ROLLOUT_FILTERS = {
    "rollout_set": "not in a --set asked for",
    "split": "of the held-out split (never exported)",
    "model": "of another --model",
    "family": "of another --family",
}


def _filtered(dropped: Counter) -> list[str]:
    """The rollout filters that dropped rollouts, in words (``"3 rollouts of another
    --model"``)."""
    return [
        f"{_count(dropped[reason], 'rollout')} {why}"
        for reason, why in _ROLLOUT_FILTERS.items()
        if dropped.get(reason)
    ]


def why_no_samples(report: ExportReport) -> str:
    """Why an SFT export kept no sample, and what to do, in one paragraph.

    Args:
        report: the counts of an export that kept no sample (:func:`sft_samples`: every
            rollout it saw is counted there, so none counted means none seen).
    """
    dropped = report.dropped
    if not dropped and not report.rollouts:
        return "the store holds no rollouts: record some with `rlmd train rollout`"
    parts = _filtered(dropped)
    if dropped.get("reward"):
        parts.append(f"{_count(dropped['reward'], 'rollout')} scored under --min-reward")
    if dropped.get("iterations"):
        parts.append(
            f"{_count(dropped['iterations'], 'rollout')} had fewer turns than --min-iterations"
        )
    if dropped.get("no_turns"):
        parts.append(
            f"{_count(dropped['no_turns'], 'rollout')} kept no root turn (imported without "
            "its trajectory)"
        )
    if dropped.get("mistake"):
        parts.append(
            f"{_count(dropped['mistake'], 'turn')} raised or misused FINAL "
            "(--keep-mistakes keeps them)"
        )
    if dropped.get("too_long"):
        parts.append(f"{_count(dropped['too_long'], 'turn')} ran over --max-chars")
    return "no sample left: " + "; ".join(parts) if parts else "no sample left"


def why_no_groups(dropped: Counter) -> str:
    """Why a GRPO export kept no group, and what to do, in one paragraph.

    Args:
        dropped: the counts :func:`grpo_groups` filled for an export that kept no group
            (every rollout it saw is counted there, so none counted means none seen).
    """
    if not dropped:
        return "the store holds no rollouts: record some with `rlmd train rollout --samples 2`"
    parts = _filtered(dropped)
    n = dropped.get("one_sample", 0)
    if n:
        parts.append(
            f"{_count(n, 'task')} had one sample (a group compares two or more: "
            "`rlmd train rollout --samples N` with N >= 2 adds samples to a set)"
        )
    n = dropped.get("zero_advantage", 0)
    if n:
        parts.append(
            f"{_count(n, 'task')} had the same reward in every sample (no advantage to learn from; "
            "--keep-zero-advantage keeps them, more samples or a higher --temperature "
            "give them spread)"
        )
    n = dropped.get("no_turns", 0)
    if n:
        parts.append(
            f"{_count(n, 'task')} had a sample whose run kept no root turn (imported without "
            "its trajectory)"
        )
    return "no group left: " + "; ".join(parts) if parts else "no group left"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def write_jsonl(records: list[dict[str, Any]], path: str | Path) -> None:
    """One JSON object per line (UTF-8, keys in insertion order)."""
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
