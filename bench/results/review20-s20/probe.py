"""Hostile probes of the rlmd-verifiers environment (review20). Usage: probe.py SCENARIO"""
import asyncio, json, os, sys, time, sqlite3, glob
from pathlib import Path
sys.path.insert(0, "tests")
import verifiers.v1 as vf
from verifiers.v1.utils.loaders import load_environment, resolve_env_config
from helpers.http_server import FakeServer, openai_reply
from helpers.scripted import repl, turn_of
from rlmd.train import verifiers_env as ve

KEY_VAR = "PROBE_KEY"
os.environ[KEY_VAR] = "upstream-key"
CONTEXT = "\n".join(f"line {i}: {'apple' if i % 7 == 0 else 'pear'}" for i in range(60))
REPLIES = [repl("n = context.count('apple')\nprint(n)"), repl("FINAL(str(n))")]
tmp = Path(sys.argv[2]); tmp.mkdir(parents=True, exist_ok=True)
secrets = []
orig = ve.RlmdHarness.launch
async def spy(self, ctx, trace, runtime, endpoint, secret, mcp, data):
    secrets.append(secret)
    return await orig(self, ctx, trace, runtime, endpoint, secret, mcp, data)
ve.RlmdHarness.launch = spy

def policy(request):
    turn = turn_of(request["body"]["messages"])
    return openai_reply(REPLIES[min(turn, 1)], model=request["body"]["model"])

def write_tasks(path, context=CONTEXT):
    path.write_text(json.dumps({"id": "apples", "question": "How many lines mention apple?",
        "context": context, "answer": 9, "scorer": "numeric"}) + "\n")

def env_for(tasks, store, **harness):
    cfg = resolve_env_config({"taskset": {"id": "rlmd-verifiers", "tasks": str(tasks)},
        "agent": {"harness": {"id": "rlmd-verifiers", "store": str(store), "max_iterations": 4, **harness}}})
    return load_environment(cfg)

async def play(env, port, before=None):
    ctx = vf.ModelContext(model="policy-m", client=vf.EvalClientConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key_var=KEY_VAR))
    task = next(iter(env.taskset))
    if before: before()
    async with env.serving():
        (slot,) = env.slots(task, 1)
        return await env.run_slot(slot, ctx)

def report(ep, t0, store=None):
    print("elapsed %.1fs" % (time.monotonic() - t0))
    print("episode.ok", ep.ok, "errors", [str(e)[:300] for e in ep.errors])
    for tr in ep.traces:
        print("trace.ok", tr.ok, "errors", [str(e)[:400] for e in tr.errors])
        print("rewards", {k: v.score for k, v in tr.rewards.items()}, "metrics", dict(tr.metrics))
        print("info", json.dumps(tr.info.get("rlmd"), default=str)[:400])
    if store and Path(store).exists():
        blob = b"".join(Path(p).read_bytes() for p in glob.glob(str(store) + "*"))
        print("secrets in store files:", [s for s in secrets if s.encode() in blob], "of", len(secrets))
        home = Path(os.environ.get("RLMD_HOME", "~/.rlmd")).expanduser()
        leaked = [str(p) for p in home.rglob("*") if p.is_file() and p.stat().st_size < 50e6 and any(s.encode() in p.read_bytes() for s in secrets)]
        print("secrets in rlmd home files:", leaked)

async def main(sc):
    tasks, store = tmp / "tasks.jsonl", tmp / "store.db"
    write_tasks(tasks)
    srv = FakeServer(policy)
    port = srv.port
    kw = {}
    before = None
    if sc == "ok": pass
    elif sc == "down": srv.close(); 
    elif sc == "garbage": srv.default = lambda r: (200, b"<html>not json</html>", {"content-type": "text/html"})
    elif sc == "e500": srv.default = lambda r: (500, {"error": {"message": "boom"}}, {})
    elif sc == "hang": srv.default = lambda r: "hang"; kw = {"max_seconds": 8}
    elif sc == "sandbox": kw = {"sandbox": "nope"}
    elif sc == "store_dir": kw = {}; store = Path("/etc/passwd/x.db")
    elif sc == "vanish": before = lambda: write_tasks_other(tasks)
    elif sc == "gone": before = lambda: tasks.unlink()
    elif sc == "binary": write_tasks(tasks, "\x00\x01\ufffd" * 1000)
    elif sc == "huge": write_tasks(tasks, "apple pear\n" * 3_000_000)
    elif sc == "inf": kw = {"max_seconds": float("inf")}
    elif sc == "nan": kw = {"max_seconds": float("nan")}
    elif sc == "bigiter": kw = {"max_iterations": 10**30}
    elif sc == "ctx1": kw = {"context_window": 1}
    elif sc.startswith("kw:"): kw = json.loads(sc[3:])
    t0 = time.monotonic()
    try:
        env = env_for(tasks, store, **kw)
        ep = await asyncio.wait_for(play(env, port, before), 200)
    except BaseException as e:
        import traceback; traceback.print_exc(limit=3)
        print("RAISED", type(e).__name__, str(e)[:500], "after %.1fs" % (time.monotonic() - t0))
        return
    finally:
        srv.close()
    report(ep, t0, store)
    print("server requests", len(srv.requests))

def write_tasks_other(path):
    path.write_text(json.dumps({"id": "other", "question": "q", "context": "c", "answer": 1, "scorer": "numeric"}) + "\n")

asyncio.run(main(sys.argv[1]))
