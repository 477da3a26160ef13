"""bench/quality generators, task sets and reports: deterministic, fast, no model, no network.

The pinned sources (essays, WordNet) are replaced by small synthetic ones; the codebase
QA tests use a package written here and the interpreter's own ``json`` package.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections import Counter
from itertools import combinations

import pytest

from bench.quality import cli, gen_code, gen_text, report, sources, suites
from bench.quality.tasks import TaskSet, render_codebase


def count(text: str) -> int:
    """A stand-in tokenizer: 4 characters per token."""
    return (len(text) + 3) // 4


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def prose(n_sentences: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(n_sentences):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        out.append(f"Sentence {i} says {words}.")
    return " ".join(out)


POOL = {
    label: [f"{label} thing number {i} with some more words" for i in range(40)]
    for label in ("animal", "artifact", "food", "plant")
}


# -- text generators ------------------------------------------------------------------------


def test_split_sentences_round_trips():
    text = "One. Two!  Three?\nFour. five"
    parts = gen_text.split_sentences(text)
    assert "".join(parts) == text
    assert parts == ["One.", " Two!", "  Three?", "\nFour.", " five"]


def test_fit_units_finds_the_largest_prefix_in_budget():
    units = [f"word{i} " * (1 + i % 5) for i in range(500)]
    for budget in (1, 50, 333, 2000):
        k = gen_text.fit_units(units, budget, count)
        assert count("".join(units[:k])) <= budget
        assert k == len(units) or count("".join(units[: k + 1])) > budget * 0.97


def test_sniah_is_deterministic_sized_and_holds_one_needle_at_its_depth():
    sentences = gen_text.split_sentences(prose(3000))
    made = []
    for _ in range(2):
        rng = random.Random(7)
        made.append(gen_text.sniah_context(rng, sentences, 4096, 0.25, "quiet-lamp", count))
    (text, needle), (text2, needle2) = made
    assert text == text2 and needle == needle2
    assert text.count("special magic number for quiet-lamp") == 1
    assert needle.value in text and re.fullmatch(r"\d{7}", needle.value)
    assert count(text) <= 4096 * 0.95 + 2
    assert count(text) >= 4096 * 0.85
    assert text.index(needle.sentence) == needle.position
    assert abs(needle.position / len(text) - 0.25) < 0.05
    at_end = gen_text.sniah_context(random.Random(1), sentences, 2048, 1.0, "k-k", count)[0]
    assert at_end.rstrip().endswith(".") and "k-k" in at_end[-200:]
    assert "quiet-lamp" in gen_text.sniah_question("quiet-lamp")


def window(seed: int = 3, tokens: int = 2048) -> gen_text.Window:
    return gen_text.oolong_window(random.Random(seed), POOL, tokens, count)


def parse_window(text: str) -> list[tuple[int, str]]:
    """``(user, instance text)`` per line, read back from the context text alone."""
    rows = []
    for line in text.splitlines():
        m = re.fullmatch(r"Date: \w{3} \d{2}, \d{4} \|\| User: (\d{5}) \|\| Instance: (.+)", line)
        assert m, line
        rows.append((int(m.group(1)), m.group(2)))
    return rows


def test_oolong_window_is_deterministic_and_its_lines_carry_the_side_labels():
    w1, w2 = window(), window()
    assert w1.text == w2.text
    assert window(4).text != w1.text
    assert count(w1.text) <= 2048 * 0.95 + 1
    rows = parse_window(w1.text)
    assert len(rows) == len(w1.records) > 20
    label_of = {t: label for label, texts in POOL.items() for t in texts}
    assert [label_of[t] for _, t in rows] == [r.label for r in w1.records]
    users = Counter(u for u, _ in rows)
    top = sorted(users.values(), reverse=True)[: -(-len(users) // 4)]
    assert sum(top) / len(rows) > 0.6  # skewed: a quarter of the users write most lines


def test_oolong_questions_answers_match_a_recount():
    w = window()
    label_of = {t: label for label, texts in POOL.items() for t in texts}
    rows = [(u, label_of[t]) for u, t in parse_window(w.text)]
    counts = Counter(label for _, label in rows)
    rng = random.Random(0)
    seen = set()
    for _ in range(60):
        template = rng.choice(gen_text.OOLONG_TEMPLATES)
        got = gen_text.oolong_question(rng, w, template)
        if got is None:
            continue
        question, answer, metric, choices, params = got
        seen.add(template)
        assert "decide each instance's category" in question
        if template == "most_common":
            assert answer == counts.most_common(1)[0][0] and metric == "exact"
        elif template == "count_label":
            assert answer == counts[params["label"]] and metric == "numeric"
        elif template == "user_count":
            assert answer == sum(
                1 for u, lab in rows if u == params["user"] and lab == params["label"]
            )
        elif template == "compare":
            a, b = params["labels"]
            want = (
                "more common"
                if counts[a] > counts[b]
                else "less common"
                if counts[a] < counts[b]
                else "same frequency"
            )
            assert answer == want and choices == gen_text.COMPARE_CHOICES
        elif template == "user_most":
            per = Counter(u for u, lab in rows if lab == params["label"])
            assert int(answer) == per.most_common(1)[0][0]
            assert int(answer) != Counter(u for u, _ in rows).most_common(1)[0][0]
    assert {"most_common", "count_label", "user_count", "compare"} <= seen


def test_pairs_gold_matches_brute_force():
    w = window(5, 3000)
    per_user: dict[int, Counter] = {}
    for r in w.records:
        per_user.setdefault(r.user, Counter())[r.label] += 1
    rng = random.Random(2)
    for template in gen_text.PAIR_TEMPLATES:
        got = gen_text.pairs_question(rng, w, template, max_pairs=10_000)
        if got is None:
            continue
        _, gold, params = got
        a, b = params["labels"]
        want = set()
        for x, y in combinations(sorted(per_user), 2):
            cx, cy = per_user[x], per_user[y]
            ok = {
                "both_have": cx[a] >= 1 and cy[a] >= 1,
                "both_have_either": cx[a] + cx[b] >= 1 and cy[a] + cy[b] >= 1,
                "one_each": (cx[a] >= 1 and cy[b] >= 1) or (cy[a] >= 1 and cx[b] >= 1),
                "both_exactly_one": cx[a] == 1 and cy[a] == 1,
                "both_none": cx[a] == 0 and cy[a] == 0,
            }[template]
            if ok:
                want.add((x, y))
        assert {tuple(p) for p in gold} == want
        assert gold == sorted(gold)


# -- codebase QA -----------------------------------------------------------------------------

PKG = {
    "pkg/__init__.py": '"""Package doc."""\nfrom .base import Shape\n__all__ = ["Shape", "make_square"]\n',
    "pkg/base.py": (
        "import os\nimport math\n\nDEFAULT_SIDE = 3\n_LIMIT = 'big'\n\n"
        "class Shape:\n    '''A shape.'''\n    def area(self):\n        return 0\n\n"
        "class Square(Shape):\n    def __init__(self, side=DEFAULT_SIDE, *, unit='cm'):\n"
        "        self.side = side\n        self.unit = unit\n"
        "    def area(self):\n        return math.pow(self.side, 2)\n\n"
        "class Circle(Shape):\n    def area(self, precision=2):\n        return round(math.pi, precision)\n\n"
        "def make_square(side=1):\n    s = Square(side)\n    s.area()\n    return s\n"
    ),
    "pkg/util.py": (
        "import os.path\nfrom math import sqrt\nfrom .base import make_square, Circle\n\n"
        "def helper(path, mode='r'):\n    make_square(2)\n    make_square(3)\n"
        "    return os.path.join(path, mode)\n\nclass Oval(Circle):\n    pass\n"
    ),
}


def test_ast_analyses_on_a_known_package():
    trees = gen_code.parse_all(PKG)
    defs = gen_code.definitions(trees)
    assert [d.path for d in defs["helper"]] == ["pkg/util.py"]
    assert len(defs["area"]) == 3
    calls = gen_code.call_counts(trees)
    assert calls["make_square"] == 2 and calls["area"] == 1 and calls["Square"] == 1
    subs = gen_code.direct_subclasses(trees)
    assert subs["Shape"] == ["Circle", "Square"] and subs["Circle"] == ["Oval"]
    defaults = {(f, p): d for _, f, p, d in gen_code.param_defaults(trees)}
    assert defaults[("__init__", "side")] == "DEFAULT_SIDE"
    assert defaults[("__init__", "unit")] == "'cm'"
    assert defaults[("helper", "mode")] == "'r'"
    consts = {(p, n): v for p, n, v in gen_code.module_constants(trees)}
    assert consts == {("pkg/base.py", "DEFAULT_SIDE"): "3", ("pkg/base.py", "_LIMIT"): "'big'"}
    imp = gen_code.importers(trees)
    assert imp["os"] == ["pkg/base.py", "pkg/util.py"] and imp["math"] == [
        "pkg/base.py",
        "pkg/util.py",
    ]


def test_codeqa_questions_are_deterministic_and_answered_by_the_analyses():
    for template in gen_code.TEMPLATES:
        a = gen_code.codeqa_question(random.Random(1), PKG, template)
        b = gen_code.codeqa_question(random.Random(1), PKG, template)
        assert a == b
        assert a is not None, template
    q, answer, metric, params = gen_code.codeqa_question(random.Random(0), PKG, "importers")
    assert (
        metric == "f1" and answer == gen_code.importers(gen_code.parse_all(PKG))[params["module"]]
    )


def test_codeqa_where_defined_on_the_real_json_package():
    files = sources.stdlib_package("json")
    assert "json/decoder.py" in files and not any("/test" in p for p in files)
    for seed in range(5):
        q, path, metric, params = gen_code.codeqa_question(
            random.Random(seed), files, "where_defined"
        )
        name = params["name"]
        defining = [
            p
            for p, t in files.items()
            if re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", t, re.M)
        ]
        assert defining == [path]


def test_rename_is_a_consistent_bijection_that_keeps_paths_and_answers():
    renamed, mapping = gen_code.rename_codebase(PKG, random.Random(4))
    again, mapping2 = gen_code.rename_codebase(PKG, random.Random(4))
    assert renamed == again and mapping == mapping2
    assert set(renamed) == set(PKG)
    assert len(set(mapping.values())) == len(mapping)
    assert {"Shape", "Square", "make_square", "helper", "DEFAULT_SIDE", "side"} <= set(mapping)
    assert not {"os", "math", "sqrt", "self", "__init__", "round"} & set(mapping)
    assert mapping["Shape"][0].isupper() and mapping["DEFAULT_SIDE"].isupper()
    assert mapping["_LIMIT"].startswith("_")
    text = "\n".join(renamed.values())
    assert "os.path.join" in text  # attributes of imported modules keep their names
    text = text.replace("os.path", "os.")
    for old in mapping:
        assert not re.search(rf"\b{old}\b", text), old
    assert "A shape." not in text and "Package doc." not in text  # docstrings dropped
    trees = gen_code.parse_all(renamed)
    assert len(trees) == len(PKG)
    subs = gen_code.direct_subclasses(trees)
    assert subs[mapping["Shape"]] == sorted([mapping["Circle"], mapping["Square"]])
    assert gen_code.definitions(trees)[mapping["helper"]][0].path == "pkg/util.py"
    calls = gen_code.call_counts(trees)
    assert calls[mapping["make_square"]] == 2
    assert f'"{mapping["make_square"]}"' in renamed["pkg/__init__.py"].replace("'", '"')


def test_rename_of_a_real_package_still_parses_and_compiles():
    files = sources.stdlib_package("json")
    renamed, mapping = gen_code.rename_codebase(files, random.Random(0))
    assert len(mapping) > 50
    for path, text in renamed.items():
        compile(text, path, "exec")
    assert "JSONDecoder" not in "".join(renamed.values())


# -- task sets, suites, reports ----------------------------------------------------------


@pytest.fixture
def fake_sources(monkeypatch):
    monkeypatch.setattr(
        sources, "essays", lambda: [("a.txt", prose(4000, 1)), ("b.txt", prose(2000, 2))]
    )
    monkeypatch.setattr(
        sources, "key_words", lambda: (["quiet", "brave", "dusty"], ["lamp", "fern", "kettle"])
    )
    items = [sources.LabelledItem(t, label, "x") for label, ts in POOL.items() for t in ts]
    monkeypatch.setattr(sources, "wordnet_items", lambda: items)
    real = sources.stdlib_package
    monkeypatch.setattr(sources, "stdlib_package", lambda name: real("json"))


SPEC = {
    "sniah": {"lengths": [1024, 4096], "per_length": 2},
    "oolong": {"lengths": [1024], "windows": 1, "questions": 3},
    "pairs": {"lengths": [1024], "windows": 1, "questions": 2},
    "codeqa": {"package": "json", "questions": 3, "renamed_questions": 2},
}


def test_generate_is_deterministic_and_round_trips(tmp_path, fake_sources):
    a = suites.generate(SPEC, tmp_path / "a", seed=11, count=count, tokenizer="test")
    suites.generate(SPEC, tmp_path / "b", seed=11, count=count, tokenizer="test")
    suites.generate(SPEC, tmp_path / "c", seed=12, count=count, tokenizer="test")
    text_a = (tmp_path / "a" / "tasks.jsonl").read_text()
    assert text_a == (tmp_path / "b" / "tasks.jsonl").read_text()
    assert text_a != (tmp_path / "c" / "tasks.jsonl").read_text()
    families = Counter(t.family for t in a.tasks)
    assert families == {"sniah": 4, "oolong": 3, "pairs": 2, "codeqa": 5}
    assert len({t.id for t in a.tasks}) == len(a.tasks)
    # oolong and pairs questions of one size share one window
    assert len({t.context_ref for t in a.tasks if t.family in ("oolong", "pairs")}) == 1
    loaded = TaskSet.load(tmp_path / "a")
    assert [t.to_dict() for t in loaded.tasks] == [t.to_dict() for t in a.tasks]
    assert loaded.verify() == []
    assert loaded.manifest["seed"] == 11 and loaded.manifest["tasks"] == len(a.tasks)
    for task in loaded.tasks:
        ctx = loaded.context(task)
        if task.family == "sniah":
            assert task.answer in ctx and task.metric == "contains"
        if task.context_kind == "codebase":
            assert isinstance(ctx, dict) and all(p.startswith("json/") for p in ctx)
            assert task.length_tokens == count(render_codebase(ctx))
            if task.params["variant"] == "renamed":
                assert "JSONDecoder" not in "".join(ctx.values())
        # gold answers score 1 with their own metric
        gold = task.answer
        text = (
            "\n".join(f"({x}, {y})" for x, y in gold)
            if task.metric == "pairs"
            else ", ".join(gold)
            if isinstance(gold, list)
            else str(gold)
        )
        assert task.score(text).value == 1.0, task.id
    # a context edited after generation is detected
    sniah = next(t for t in loaded.tasks if t.family == "sniah")
    (tmp_path / "a" / sniah.context_ref).write_text("tampered")
    assert sniah.id in TaskSet.load(tmp_path / "a").verify()


def test_score_command_scores_another_systems_answers(tmp_path, fake_sources, capsys):
    ts = suites.generate(SPEC, tmp_path / "t", seed=1, count=count, tokenizer="test")
    answers = tmp_path / "answers.jsonl"
    with open(answers, "w") as f:
        for task in ts.tasks[:2]:
            f.write(json.dumps({"id": task.id, "answer": f"It is {task.answer}."}) + "\n")
    assert cli.main(["score", str(tmp_path / "t"), str(answers)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["score"] for r in rows[:2]] == [1.0, 1.0]
    assert all(r["score"] == 0.0 for r in rows[2:])


def fake_results() -> dict:
    results = []
    for system, base in (("plain", 0.0), ("rlmd-d1", 0.5)):
        for i, (fam, length) in enumerate((("sniah", 1000), ("sniah", 16000), ("codeqa", 13000))):
            results.append(
                {
                    "task_id": f"t{i}", "system": system, "family": fam, "length_tokens": length,
                    "score": base + 0.25 * i, "score_detail": "", "parsed": None, "answer": "a|b",
                    "status": "completed", "answer_source": "final", "input_tokens": 1500,
                    "output_tokens": 20, "calls": 2, "subcalls": 1, "iterations": 2, "wall_s": 12.5,
                    "trajectory": "abc", "error": None, "extra": {},
                }
            )  # fmt: skip
    return {
        "meta": {"endpoint": {"n_ctx": 8192}},
        "tasks": [{"id": "t0", "answer": "42"}],
        "results": results,
    }


def test_report_markdown_tables():
    md = report.markdown(fake_results())
    assert "| system | sniah | codeqa | all |" in md  # only the families present
    assert "| plain | 0.12 | 0.50 | **0.25** | 3/3 | 12 | 1.5k | 2.0 |" in md
    assert "| t0 | sniah | 1,000 | 42 | 0.00 | 0.50 |" in md
    assert "a\\|b" in md  # pipes in answers do not break the table
    assert md.count("| t1 |") == 3


def test_compare_table_pairs_runs_by_task_and_system(tmp_path, capsys):
    before = fake_results()
    after = fake_results()
    for r in after["results"]:
        if r["system"] == "rlmd-d1":
            r["score"], r["trajectory"] = 1.0, "new"
    after["results"] = [r for r in after["results"] if r["system"] == "rlmd-d1"]
    md = report.compare(before, after)
    assert "| rlmd-d1 | 3 | 0.75 | **1.00** | 3/3 | 3/3 | 12 | 12 |" in md
    assert (
        "| t2 | rlmd-d1 | 1.00 → **1.00** | completed → completed | a\\|b | 12 → 12 | abc | new |"
        in md
    )
    assert "| plain |" not in md  # only what the after-run has
    for name, data in (("b", before), ("a", after)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(data))
    assert cli.main(["compare", str(tmp_path / "b"), str(tmp_path / "a")]) == 0
    assert "| t0 | rlmd-d1 | 0.50 → **1.00** |" in capsys.readouterr().out


def test_report_plots_are_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    paths = report.plots(fake_results(), tmp_path)
    assert [p.name for p in paths] == ["accuracy_vs_length.png", "cost_time.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plain_prompt_is_cut_to_the_window(tmp_path, fake_sources):
    from bench.quality.systems import Endpoint, Limits, PlainSystem
    from bench.quality.tokenizer import estimate_tokenizer

    ts = suites.generate(SPEC, tmp_path / "t", seed=1, count=count, tokenizer="test")
    plain = PlainSystem(
        Endpoint("http://127.0.0.1:9/v1", "m", 2048), estimate_tokenizer(), Limits()
    )
    small = next(t for t in ts.tasks if t.family == "sniah" and t.length_tokens < 1000)
    big = next(t for t in ts.tasks if t.family == "codeqa")
    prompt, cut = plain.prompt(small, ts.context(small))
    assert not cut and ts.context(small) in prompt and prompt.endswith(small.question)
    prompt, cut = plain.prompt(big, ts.context(big))
    assert cut and count(prompt) <= 2048 - Limits().plain_answer_tokens
    assert prompt.endswith(big.question)
    assert ast.literal_eval("1") == 1


def test_server_stats_reads_llama_cpp_timings_after_an_offset(tmp_path):
    log = tmp_path / "server.log"
    old = "llama_perf_context_print: prompt eval time = 10.0 ms / 99 tokens\n"
    call = (
        "llama_perf_context_print: prompt eval time =   38255.84 ms /  1053 tokens (x)\n"
        "llama_perf_context_print:        eval time =    1373.67 ms /     7 runs   (x)\n"
        "llama_perf_context_print:       total time =   75474.46 ms /  1060 tokens\n"
    )
    log.write_text(old + call + call)
    stats = cli.server_stats(log, len(old), drained=True)
    assert stats == {
        "calls": 1,
        "prompt_tokens_evaluated": 2106,
        "prompt_eval_s": 76.5,
        "generated_tokens": 14,
        "generation_s": 2.7,
    }


# -- issue 15: multi-language code intelligence, per-item judgement, splits -------------------

JS_FILES = {
    "lib/error.js": "class BaseError extends Error {\n  constructor(m) { super(m); }\n}\n"
    "class ParseError extends BaseError {\n  where() { return 1; }\n  why() { return 2; }\n}\n"
    "module.exports = { BaseError, ParseError };\n",
    "lib/run.js": "const { ParseError } = require('./error');\n"
    "function runCommand(argv) { throw new ParseError('x'); }\n",
}


def test_js_ground_truth_comes_from_the_syntax_tree():
    from bench.quality import gen_multi

    info = gen_multi.js_definitions(JS_FILES)
    assert info["defs"]["runCommand"] == [("lib/run.js", "function", 2)]
    assert info["bases"] == {"BaseError": "Error", "ParseError": "BaseError"}
    assert info["methods"]["ParseError"] == ["where", "why"]
    rng = random.Random(0)
    q, answer, metric, params = gen_multi.js_question(rng, JS_FILES, "methods")
    assert (answer, metric, params["class"]) == (["where", "why"], "f1", "ParseError")
    q, answer, metric, _ = gen_multi.js_question(rng, JS_FILES, "subclasses")
    assert metric == "f1" and answer in (["BaseError"], ["ParseError"])


def test_js_renaming_is_a_consistent_bijection_and_keeps_the_answers_computable():
    from bench.quality import gen_multi

    renamed, mapping = gen_multi.rename_words(JS_FILES, random.Random(3))
    assert {"BaseError", "ParseError", "runCommand", "where"} <= set(mapping)
    assert len(set(mapping.values())) == len(mapping)
    text = "\n".join(renamed.values())
    assert "ParseError" not in text and "runCommand" not in text
    assert "extends Error" in text  # a builtin keeps its name
    info = gen_multi.js_definitions(renamed)
    assert info["bases"][mapping["ParseError"]] == mapping["BaseError"]


def test_judge_questions_count_labels_kept_aside():
    from bench.quality import gen_multi

    pool = {
        "animal": ["a furry beast", "a bird"],
        "food": ["a dish", "a fruit"],
        "plant": ["a tree"],
    }
    rng = random.Random(5)
    items = gen_multi.judge_items(rng, pool, 12, ["animal", "food", "plant"])
    text = gen_multi.judge_context(items)
    assert text.count("\n") == 12 and "animal" not in text
    q, answer, metric, choices, params = gen_multi.judge_question(
        rng, items, ["animal", "food", "plant"], "count_label"
    )
    assert metric == "numeric" and answer == sum(1 for lab, _ in items if lab == params["label"])
    assert choices is None and "describe a " + params["label"] in q


def test_splits_are_deterministic_and_roughly_even():
    from bench.quality.suites import split_of

    ids = [f"t-{i:03d}" for i in range(200)]
    splits = [split_of(0, i) for i in ids]
    assert splits == [split_of(0, i) for i in ids]
    assert 60 <= splits.count("heldout") <= 140
    assert splits != [split_of(1, i) for i in ids]
