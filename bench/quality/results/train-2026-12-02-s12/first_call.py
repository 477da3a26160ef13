"""What the tuned model's first root call wrote when the run recorded nothing (the call ran out
of the 120 s before it returned): the recorded prompt of that call sent again to the same
llama.cpp setup (base GGUF + the LoRA GGUF, n_ctx 8192, 1 thread, temperature 0, the engine's
1,024-token cap, the engine's stop string), timed. Under the model lock.
usage: python first_call.py SET TASK [MAX_TOKENS]"""

import json
import sqlite3
import sys
import time

from llama_cpp import Llama

set_name, task = sys.argv[1:3]
cap = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
db = sqlite3.connect("file:home/rlmd.db?mode=ro", uri=True)
(rid,) = db.execute(
    "select run_id from rollouts where rollout_set=? and task_id=?", (set_name, task)
).fetchone()
(data,) = db.execute(
    "select data from nodes where run_id=? and kind='model_call' order by seq limit 1", (rid,)
).fetchone()
messages = json.loads(data)["messages"]
base = next(p for p in __import__("glob").glob("home/models/qwen2.5-coder-0.5b-*.gguf"))
lora = json.load(open("home/models/adapters/qwen0.5b-rlm-s12.json"))["lora_path"]
llm = Llama(model_path=base, lora_path=lora, n_ctx=8192, n_threads=1, verbose=False)
t0 = time.time()
out = llm.create_chat_completion(
    messages=messages, max_tokens=cap, temperature=0, stop=["\n```\n"]  # STOP_AFTER_BLOCK
)
print(f"{set_name} {task} run {rid}: {time.time() - t0:.1f} s, usage {out['usage']}, "
      f"finish {out['choices'][0]['finish_reason']}")
print(out["choices"][0]["message"]["content"])
