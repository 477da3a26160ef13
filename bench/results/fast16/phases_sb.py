"""Session 15's phases.py (bench/results/fast15/) for another sandbox: runs it with
harness.rlmd_whole_run's sandbox forced to SANDBOX.
    PYTHONPATH=<checkout>:<checkout>/bench python phases_sb.py SANDBOX N store|nostore"""
import runpy, sys
from pathlib import Path
import harness as h

sandbox = sys.argv[1]
real = h.rlmd_whole_run
async def forced(*a, **k):
    k["sandbox"] = sandbox
    return await real(*a, **k)
h.rlmd_whole_run = forced
sys.argv = ["phases.py", *sys.argv[2:]]
runpy.run_path(str(Path(__file__).resolve().parent.parent / "fast15" / "phases.py"), run_name="__main__")
