"""The benchmark metrics live in :mod:`rlmd.train.scoring` (training rewards use the same
ones); this name stays for the benchmark code and its users."""

from rlmd.train.scoring import (  # noqa: F401
    METRICS,
    NUMERIC_BASE,
    Score,
    f1_matched,
    normalize,
    parse_items,
    parse_number,
    parse_pairs,
    score_answer,
)
