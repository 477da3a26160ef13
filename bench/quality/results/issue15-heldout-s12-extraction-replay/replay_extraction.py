"""Replay a recorded extraction call (its exact messages) against a fresh llama_cpp.server,
with the recorded last user message and with the same message under a new EXTRACTION_USER.

usage: python replay_extraction.py OUT.json TRAJECTORY.json [TRAJECTORY.json ...]
(PYTHONPATH: the code whose prompts.EXTRACTION_USER is the 'new' wording; the 'old' wording
is the recorded message itself). Greedy (temperature 0), max_tokens 512, as the bench.
"""
import json
import sys
import time
import urllib.request
from pathlib import Path

from bench.quality.server import LlamaServer
from rlmd.engine import prompts

OLD_TAIL = (
    "If they do not support an answer, say exactly what is known and that the answer is "
    "incomplete. Reply with the answer only, no code."
)


def extraction_call(path):
    run = json.load(open(path))["run"]
    found = []

    def walk(n):
        d = n.get("data") or {}
        if n["kind"] == "model_call" and d.get("role") == "extraction":
            found.append((n, d))
        for c in n.get("children", []):
            walk(c)

    for n in run["nodes"]:
        walk(n)
    return run, found[0]


def history(run):
    """The root conversation as sent: messages are recorded incrementally per call."""
    msgs = []

    def walk(n):
        d = n.get("data") or {}
        if n["kind"] == "model_call":
            msgs.append(d)
        for c in n.get("children", []):
            walk(c)

    for n in run["nodes"]:
        walk(n)
    return msgs


def chat(url, messages):
    body = json.dumps(
        {"model": "m", "messages": messages, "temperature": 0, "max_tokens": 512}
    ).encode()
    req = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=900) as r:
        out = json.load(r)
    return out["choices"][0]["message"]["content"], time.monotonic() - t, out.get("usage")


def main():
    out_path, trajs = sys.argv[1], sys.argv[2:]
    gguf = next(Path.home().joinpath(".local/share/rlmd/models").rglob("qwen2.5-coder-1.5b*.gguf"))
    results = []
    with LlamaServer(gguf, "m", n_ctx=8192, n_threads=1) as server:
        for path in trajs:
            run, (node, data) = extraction_call(path)
            messages = data["messages"]
            recorded = data.get("response") or data.get("text")
            last = messages[-1]["content"]
            assert last.endswith(OLD_TAIL), last[-200:]
            new_last = prompts.EXTRACTION_USER.format(
                reason=last.split("The task has stopped (", 1)[1].split("); no more code", 1)[0],
                question=run["question"],
            )
            for variant, content in (("old", last), ("new", new_last)):
                text, secs, usage = chat(server.base_url, [*messages[:-1], {"role": "user", "content": content}])
                row = {"trajectory": Path(path).stem, "question": run["question"], "variant": variant,
                       "recorded": recorded, "answer": text, "seconds": round(secs, 1), "usage": usage,
                       "last_user": content}
                print(json.dumps(row)[:600], flush=True)
                results.append(row)
    json.dump(results, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
