"""Scripted models for the cluster tests, in an importable module: the tree's registry is
pickled to the nodes by reference to these functions."""

from __future__ import annotations

from helpers.scripted import question_of, repl, turn_of

FAN_OUT = 8


def fan_out(messages: list[dict]) -> str:
    """Root: ask 8 children about the same context, then join their answers. A child
    ("part N"): look at the context in one cell, answer in the next."""
    question, turn = question_of(messages), turn_of(messages)
    if question.startswith("part "):
        if turn == 0:
            return repl("n = len(context)\nprint(n)")
        return repl(f"FINAL('{question}: ' + str(n))")
    if turn == 0:
        return repl(
            f"answers = rlm_query_batched([f'part {{i}}' for i in range({FAN_OUT})], "
            f"contexts=[context] * {FAN_OUT})\nprint(answers)"
        )
    return repl("FINAL(' | '.join(answers))")


def endless(messages: list[dict]) -> str:
    """Root: fan out 8 children; a child computes and prints forever (never answers)."""
    question, turn = question_of(messages), turn_of(messages)
    if question.startswith("part "):
        return repl(f"x = {turn} * 2\nprint('still working', x)")
    if turn == 0:
        return repl(
            f"answers = rlm_query_batched([f'part {{i}}' for i in range({FAN_OUT})])\n"
            "print(answers)"
        )
    return repl("FINAL(' | '.join(answers))")


def sleepy(messages: list[dict]) -> str:
    """Root: fan out 8 children; a child's first cell sleeps for ten minutes."""
    question, turn = question_of(messages), turn_of(messages)
    if question.startswith("part "):
        return repl("import time\ntime.sleep(600)")
    if turn == 0:
        return repl(
            f"answers = rlm_query_batched([f'part {{i}}' for i in range({FAN_OUT})])\n"
            "print(answers)"
        )
    return repl("FINAL(' | '.join(answers))")


def env_probe(messages: list[dict]) -> str:
    """Root: one child; the child prints whether the sandbox sees the test secret."""
    question, turn = question_of(messages), turn_of(messages)
    if question.startswith("part "):
        if turn == 0:
            return repl(
                "import os\nseen = os.environ.get('RLMD_TEST_SECRET', 'absent')\nprint(seen)"
            )
        return repl("FINAL(seen)")
    if turn == 0:
        return repl("got = rlm_query('part 0', context='x')\nprint(got)")
    return repl("FINAL(got)")
