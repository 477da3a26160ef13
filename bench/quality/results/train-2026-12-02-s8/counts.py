"""Counts of a teacher SFT export: samples, repair targets, turns, mistake kinds, token lengths
(the 0.5B's chat template, as `rlmd train sft` renders them) at caps of 1,024 and 2,048, and a check that no target is a
turn the teacher marked as a mistake.

    python counts.py SFT.jsonl RLMD_HOME TOKENIZER_FOLDER [ROLLOUT_SET (default teacher)]
"""

import json
import sys
from collections import Counter

from transformers import AutoTokenizer

from rlmd.store import Store
from rlmd.train.sft import _length, length_report

sft, home, tok = sys.argv[1:4]
rollout_set = sys.argv[4] if len(sys.argv) > 4 else "teacher"
samples = [json.loads(line) for line in open(sft, encoding="utf-8")]
with Store(f"{home}/rlmd.db") as store:
    rows = store.rollouts(rollout_set)
kinds = Counter(r["details"].get("mistake") for r in rows)
marked = {(r["run_id"], t) for r in rows for t in r["details"].get("mistake_turns") or []}
assert not any((s["run_id"], s["turn"]) in marked for s in samples), "a mistake is a target"
tokenizer = AutoTokenizer.from_pretrained(tok)
caps = {cap: length_report(tokenizer, samples, cap) for cap in (1024, 2048)}
repairs = [s for s in samples if s["repair"]]
system = [len(tokenizer(s["prompt"][0]["content"])["input_ids"]) for s in samples]
by_turn: dict[int, list[int]] = {}
for s in samples:
    by_turn.setdefault(s["turn"], []).append(_length(tokenizer, s))
print(
    json.dumps(
        {
            "rollouts": len(rows),
            "reward_1": sum(r["reward"] == 1.0 for r in rows),
            "mistakes": dict(kinds),
            "cells_raised": sum(r["cell_errors"] for r in rows),
            "samples": len(samples),
            "repair_targets": len(repairs),
            "repair_targets_by_family": dict(Counter(s["family"] for s in repairs)),
            "samples_by_family": dict(Counter(s["family"] for s in samples)),
            "system_prompt_tokens_min_max": [min(system), max(system)],
            "tokens_by_turn_min_max": {t: [min(v), max(v)] for t, v in sorted(by_turn.items())},
            **{
                f"at_{cap}": {
                    "kept": sum(r["kept"]),
                    "by_turn_kept_total": r["by_turn"],
                    "answering_kept_total": r["answering"],
                    "repairs_kept": sum(
                        k for k, s in zip(r["kept"], samples, strict=True) if s["repair"]
                    ),
                }
                for cap, r in caps.items()
            },
        },
        indent=1,
    )
)
