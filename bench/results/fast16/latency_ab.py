"""Session 15's inproc_ab.py (bench/results/fast15/: the before copy's Store against this
checkout's, alternating run by run in one process) with a root model that takes DELAY_MS
(a thread that sleeps then wakes the loop, as a socket read would: an
asyncio.sleep would not do, epoll rounds its remaining wait up to whole milliseconds) before each answer; sub-calls stay instant.
    PYTHONPATH=<after>:<after>/bench python latency_ab.py DELAY_MS BEFORE N"""
import asyncio, runpy, sys, time
from pathlib import Path
from rlmd.models import scripted

delay = float(sys.argv[1]) / 1000
real = scripted.ScriptedModel._complete
async def slow(self, *a, **k):
    if self.name == "root":
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, delay)
    return await real(self, *a, **k)
scripted.ScriptedModel._complete = slow
sys.argv = ["inproc_ab.py", *sys.argv[2:]]
runpy.run_path(str(Path(__file__).resolve().parent.parent / "fast15" / "inproc_ab.py"), run_name="__main__")
