"""Answer-quality evaluation helpers (scoring) shared by ``bench/quality`` and anyone who
wants to score rlmd answers against known ones."""

from rlmd.eval.scoring import METRICS, Score, score_answer

__all__ = ["METRICS", "Score", "score_answer"]
