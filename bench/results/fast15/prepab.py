"""_prepare's walk over one bench-3 run's 203 events: before's codec+redact vs after's, alternating in one process."""
import asyncio, importlib.util, sys, time, statistics
import harness as h, rlmd.engine as eng
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m); return m
B = {"codec": load("b_codec", "/tmp/f15/before/rlmd/store/codec.py"), "redact": load("b_redact", "/tmp/f15/before/rlmd/redact.py")}
A = {"codec": load("a_codec", sys.argv[1] + "/rlmd/store/codec.py"), "redact": load("a_redact", sys.argv[1] + "/rlmd/redact.py")}
events = []
script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
models = h.RlmdScript(script)
asyncio.run(eng.run_task(h.QUESTION, h.SMALL_CONTEXT, h.engine_config(len(script), "inprocess"), get_model=models.get_model, sinks=(events.append,)))
def prep(M):
    t = time.thread_time()
    out = [M["codec"].to_jsonable(e.data, M["redact"].text_redactor()) for e in events]
    return time.thread_time() - t, out
assert prep(A)[1] == prep(B)[1]
r = {"before": [], "after": []}
for i in range(400):
    r["before"].append(prep(B)[0]); r["after"].append(prep(A)[0])
b, a = statistics.median(r["before"]) * 1e3, statistics.median(r["after"]) * 1e3
print(f"_prepare walk per run (203 events): before {b:.3f} ms, after {a:.3f} ms, after/before {a/b:.3f}")
