"""Where the host's CPU goes in bench 3's run (subprocess or in-process sandbox, with the
store): thread CPU (time.thread_time_ns) of chosen synchronous functions, exclusive of the
chosen functions they call, accumulated over N runs in one process; the rest of the run's
process CPU is "other" (the loop's own Python, asyncio, the kernel's pipes' reads...).
    PYTHONPATH=<checkout>:<checkout>/bench python cpu_parts.py N [subprocess|inprocess]"""
import asyncio, collections, functools, importlib, statistics, sys, tempfile, time
from pathlib import Path
import harness as h

N = int(sys.argv[1]); SANDBOX = sys.argv[2] if len(sys.argv) > 2 else "subprocess"
ACC = collections.Counter(); CNT = collections.Counter(); STACK = []

def wrap(modname, qual):
    mod = importlib.import_module(modname)
    owner, _, name = qual.rpartition(".")
    obj = getattr(mod, owner) if owner else mod
    fn = getattr(obj, name)
    label = qual.split(".")[-1] if not owner else qual
    @functools.wraps(fn)
    def w(*a, **k):
        t0 = time.thread_time_ns(); STACK.append(0)
        try:
            return fn(*a, **k)
        finally:
            el = time.thread_time_ns() - t0; child = STACK.pop()
            ACC[label] += el - child; CNT[label] += 1
            if STACK: STACK[-1] += el
    setattr(obj, name, w)

for mod, q in [
    ("rlmd.store.db", "Store.record_batched"), ("rlmd.store.db", "Store._prepare"),
    ("rlmd.store.db", "Store.flush"), ("rlmd.store.db", "Store.__init__"), ("rlmd.store.db", "Store.close"),
    ("rlmd.store.journal", "Journal.append") if hasattr(importlib.import_module("rlmd.store.journal"), "Journal") else ("rlmd.store.db", "Store._persist"),
    ("rlmd.models.tokens", "estimate_tokens"),
    ("rlmd.sandbox.channel", "KernelChannel._on_frames"), ("rlmd.sandbox.channel", "KernelChannel._dispatch"),
    ("rlmd.sandbox.channel", "KernelChannel.request"),
    ("rlmd.sandbox.channel", "exec_done_problem"), ("rlmd.sandbox.channel", "StderrDrain.feed"),
    ("rlmd.sandbox.process.transport", "ProcessKernel.send"),
    ("rlmd.sandbox.process.transport", "ProcessKernel.cpu_s"),
    ("rlmd.sandbox.process.launch", "launch"),
    ("rlmd.engine.events", "EventBus.emit"),
]:
    wrap(mod, q)
# modules that imported names directly
import rlmd.models.tokens as tk, rlmd.sandbox.spares as sp
for m in list(sys.modules.values()):
    if m and getattr(m, "__name__", "").startswith("rlmd") and getattr(m, "estimate_tokens", None) is not None and m is not tk:
        m.estimate_tokens = tk.estimate_tokens

async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    cpu = []
    for i in range(N + 3):
        if i == 3: ACC.clear(); CNT.clear()
        c = time.process_time_ns(); t = time.thread_time_ns()
        r = await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox=SANDBOX, store_path=db)
        if i >= 3: cpu.append((time.process_time_ns() - c, time.thread_time_ns() - t))
        assert not r.store_errors and r.result.status == "completed"
    tot = sum(x[0] for x in cpu) / N / 1e6; th = sum(x[1] for x in cpu) / N / 1e6
    print(f"{SANDBOX} n={N}: process CPU {tot:.2f} ms/run (main thread {th:.2f}), load {open('/proc/loadavg').read().split()[0]}")
    s = 0
    for k, v in ACC.most_common():
        s += v / N / 1e6
        print(f"  {k:40s} {v / N / 1e6:7.2f} ms/run  {CNT[k] / N:7.1f} calls/run  {v / max(CNT[k],1) / 1e3:7.1f} us/call")
    print(f"  {'other (main thread)':40s} {th - s:7.2f} ms/run")
asyncio.run(main())
