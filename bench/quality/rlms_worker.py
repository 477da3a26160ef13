"""Run one task with the ``rlms`` reference in its own process (``python -m
bench.quality.rlms_worker SPEC.json OUT.json``).

A separate process because the reference executes model code with ``exec`` in the
calling process and has no per-cell timeout: the parent kills this process when it runs
past the task's time limit. The spec is written by :class:`bench.quality.systems.RlmsSystem`.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path


def _context(spec: dict) -> object:
    path = Path(spec["context_path"])
    if spec["context_kind"] == "codebase":
        return {
            p.relative_to(path).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(path.rglob("*"))
            if p.is_file()
        }
    return path.read_text(encoding="utf-8")


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    from rlm import RLM
    from rlm.logger import RLMLogger

    logger = RLMLogger(log_dir=spec["log_dir"], file_name=spec["task_id"])
    rlm = RLM(
        backend="openai",
        backend_kwargs={
            "model_name": spec["model_name"],
            "base_url": spec["base_url"],
            "api_key": "x",
        },
        environment="local",
        max_depth=spec["max_depth"],
        max_iterations=spec["max_iterations"],
        max_timeout=spec["timeout_s"],
        sampling_args={"temperature": 0, "extra_body": {"max_tokens": spec["max_tokens"]}},
        logger=logger,
    )
    started = time.perf_counter()
    out: dict = {"status": "completed", "answer": None, "error": None}
    try:
        result = rlm.completion(_context(spec), root_prompt=spec["question"])
        out["answer"] = result.response
        usage = result.usage_summary
        out["input_tokens"] = usage.total_input_tokens
        out["output_tokens"] = usage.total_output_tokens
        out["calls"] = sum(s.total_calls for s in usage.model_usage_summaries.values())
    except Exception as exc:  # the reference's limit errors carry a partial answer
        out["status"] = type(exc).__name__
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        out["answer"] = getattr(exc, "partial_answer", None)
        out["traceback"] = traceback.format_exc()[-3000:]
    out["wall_s"] = time.perf_counter() - started
    out["iterations"] = logger.iteration_count
    out["log_file"] = logger.log_file_path
    Path(out_path).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
