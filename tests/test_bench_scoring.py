"""bench.quality.scoring: the metrics the quality benchmarks report."""

from __future__ import annotations

import pytest

from bench.quality.scoring import (
    METRICS,
    normalize,
    parse_items,
    parse_number,
    parse_pairs,
    score_answer,
)


def test_contains_is_case_insensitive_fraction_of_gold_strings():
    assert score_answer("The number is 3954149.", "3954149", "contains").value == 1.0
    assert score_answer("nothing here", "3954149", "contains").value == 0.0
    s = score_answer("alpha and GAMMA", ["alpha", "beta", "gamma", "delta"], "contains")
    assert s.value == 0.5
    assert s.parsed == ["alpha", "gamma"]


@pytest.mark.parametrize("answer", [None, "", "   "])
def test_no_answer_scores_zero_for_every_metric(answer):
    golds = {
        "contains": "x",
        "exact": "x",
        "numeric": 3,
        "f1": ["a"],
        "pairs": [[1, 2]],
        "path": "a/b.py",
    }
    for metric in METRICS:
        assert score_answer(answer, golds[metric], metric).value == 0.0


def test_unknown_metric_raises():
    with pytest.raises(ValueError, match="unknown metric"):
        score_answer("x", "x", "bleu")


@pytest.mark.parametrize(
    "answer",
    ["animal", "Animal.", "  'animal' ", "Answer: animal", "`animal`", "Final answer: animal"],
)
def test_exact_ignores_case_quotes_punctuation_and_answer_prefix(answer):
    assert score_answer(answer, "animal", "exact").value == 1.0


def test_exact_after_last_colon():
    assert score_answer("Label: more common", "more common", "exact").value == 1.0


def test_exact_with_choices_needs_the_gold_choice_and_no_other():
    labels = ["animal", "plant", "food"]
    assert score_answer("The most common is animal.", "animal", "exact", choices=labels).value == 1
    assert score_answer("Animals are most common", "animal", "exact", choices=labels).value == 1
    assert score_answer("animal or plant", "animal", "exact", choices=labels).value == 0
    assert score_answer("plant", "animal", "exact", choices=labels).value == 0
    cmp = ["more common", "less common", "same frequency"]
    assert score_answer("It is less common.", "less common", "exact", choices=cmp).value == 1
    assert score_answer("It is less common.", "more common", "exact", choices=cmp).value == 0


def test_exact_python_expression_answers():
    assert score_answer("'utf-8'", "'utf-8'", "exact").value == 1.0
    assert score_answer('"utf-8"', "'utf-8'", "exact").value == 1.0
    assert score_answer("None", "None", "exact").value == 1.0
    assert score_answer("1", "0", "exact").value == 0.0


def test_numeric_partial_credit_is_075_to_the_absolute_error():
    assert score_answer("12", 12, "numeric").value == 1.0
    assert score_answer("13", 12, "numeric").value == pytest.approx(0.75)
    assert score_answer("10", 12, "numeric").value == pytest.approx(0.75**2)
    assert score_answer("no idea", 12, "numeric").value == 0.0
    assert score_answer("1,200", 1200, "numeric").value == 1.0


def test_parse_number_reads_after_last_colon_else_the_last_number():
    assert parse_number("Answer: 7") == 7
    assert parse_number("In 2023 there were 7") == 7
    assert parse_number("Count for user 12345: 3 instances") == 3
    assert parse_number("-4") == -4
    assert parse_number("2.5") == 2.5
    assert parse_number("none") is None
    assert parse_number("x1 y2") is None  # digits inside identifiers are not numbers


def test_f1_over_list_literals_and_separated_items():
    gold = ["Alpha", "Beta", "Gamma"]
    assert score_answer("['Alpha', 'Beta', 'Gamma']", gold, "f1").value == 1.0
    assert score_answer("Alpha, Beta and Gamma", gold, "f1").value == 1.0
    assert score_answer("- Alpha\n- Beta\n- Gamma", gold, "f1").value == 1.0
    s = score_answer("Alpha, Delta", gold, "f1")
    assert s.value == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert score_answer("Delta", gold, "f1").value == 0.0


def test_f1_matches_paths_by_suffix():
    gold = ["wsgiref/handlers.py", "wsgiref/util.py"]
    assert score_answer("handlers.py, wsgiref/util.py", gold, "f1").value == 1.0
    assert score_answer("/usr/lib/python3.11/wsgiref/util.py", gold, "f1").value == pytest.approx(
        2 / 3
    )


def test_parse_items_dedupes_nothing_but_normalises():
    assert parse_items("[1, 2]") == ["1", "2"]
    assert parse_items("1. foo\n2. bar") == ["foo", "bar"]
    assert parse_items("") == []


def test_pairs_f1_is_order_insensitive_within_and_across_pairs():
    gold = [[1, 2], [3, 4], [5, 6]]
    assert score_answer("(2, 1)\n(3, 4)\n(6, 5)", gold, "pairs").value == 1.0
    assert score_answer("[[1, 2], [3, 4]]", gold, "pairs").value == pytest.approx(0.8)
    assert score_answer("1-2, 3-4, 5-6, 7-8", gold, "pairs").value == pytest.approx(6 / 7)
    assert score_answer("no pairs", gold, "pairs").value == 0.0
    assert parse_pairs("(7, 7)") == set()


def test_path_metric():
    gold = "wsgiref/validate.py"
    assert score_answer("wsgiref/validate.py", gold, "path").value == 1.0
    assert score_answer("It is in `Lib/wsgiref/validate.py`.", gold, "path").value == 1.0
    assert score_answer("validate.py", gold, "path", unique_basename=True).value == 1.0
    assert score_answer("validate.py", gold, "path", unique_basename=False).value == 0.0
    assert score_answer("wsgiref/util.py", gold, "path").value == 0.0
    assert score_answer("I don't know", gold, "path").value == 0.0


def test_normalize():
    assert normalize("  Answer: 'Hello   World'. ") == "hello world"
    assert normalize("wsgiref/util.py") == "wsgiref/util.py"
    assert normalize("_private_name") == "_private_name"
