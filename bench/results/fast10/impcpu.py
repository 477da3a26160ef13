"""CPU of importing ``rlmd run``'s modules in a fresh process, per rlmd checkout,
alternating: ``python impcpu.py REPS ROOT...``."""

import os
import statistics
import subprocess
import sys

CODE = r"""
import gc; gc.disable()
import time, sys
t0 = time.process_time()
import rlmd.cli.main; M = sys.modules['rlmd.cli.main']
try: M._parser('run')
except TypeError: M._parser()
import rlmd.context, rlmd.config, rlmd.sandbox.process, rlmd.runner, rlmd.store, rlmd.engine.loop
s = rlmd.config.load(None)
print((time.process_time() - t0) * 1000, 'pathspec' in sys.modules, len(sys.modules))
"""


def main() -> None:
    reps, roots = int(sys.argv[1]), sys.argv[2:]
    res: dict[str, list[float]] = {r: [] for r in roots}
    info: dict[str, list[str]] = {}
    for i in range(reps):
        for r in roots if i % 2 == 0 else roots[::-1]:
            env = dict(os.environ, PYTHONPATH=r)
            cmd = [sys.executable, "-c", CODE]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/tmp")
            words = out.stdout.split()
            res[r].append(float(words[0]))
            info[r] = words[1:]
    for r in roots:
        print(
            f"{r:24s} import CPU median {statistics.median(res[r]):6.1f} ms "
            f"(min {min(res[r]):.1f}); pathspec imported {info[r][0]}, modules {info[r][1]}"
        )
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
