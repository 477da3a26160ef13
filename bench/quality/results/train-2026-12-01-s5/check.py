"""Held-out turn-2 prompts (the state after a first look): does the model copy its previous
turn, or write new code / FINAL? Greedy, 120 tokens, through rlmd's local provider."""

import asyncio
import json
import os
import sys
import time

from rlmd.engine.config import STOP_AFTER_BLOCK
from rlmd.models.base import ModelSpec
from rlmd.models.local import LocalModel

G = "/root/.local/share/rlmd/models/qwen2.5-coder-0.5b-instruct-q4_k_m-1d9614638d18.gguf"
cases = json.load(open("heldout_turn1.json"))
print("load", os.getloadavg(), time.strftime("%H:%M:%S"), flush=True)
for name, lora in [
    ("base", None),
    ("s4-2steps", "/work/s4/train-measure/home/train/qwen0.5b-rlm-sft/adapter.gguf"),
    ("s5", sys.argv[1] if len(sys.argv) > 1 else None),
]:
    if name == "s5" and not lora:
        continue
    m = LocalModel(
        ModelSpec(
            name,
            "local",
            G,
            options={"n_ctx": 4096, **({"lora_path": lora} if lora else {})},
            n_threads=2,
        )
    )
    for c in cases:
        r = asyncio.run(m.complete(c["prompt"], max_tokens=160, stop=list(STOP_AFTER_BLOCK)))
        text = r.text
        print(
            json.dumps(
                {
                    "model": name,
                    "task": c["task_id"],
                    "copies_previous": text.strip() == c["previous"].strip(),
                    "has_final": "FINAL" in text,
                    "fenced_repl": "```repl" in text,
                    "reply": text[:300],
                }
            ),
            flush=True,
        )
    asyncio.run(m.aclose())
print("load", os.getloadavg(), time.strftime("%H:%M:%S"), flush=True)
