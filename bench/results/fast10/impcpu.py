import os, subprocess, sys, statistics
CODE = r'''
import gc; gc.disable()
import time, sys
t0 = time.process_time()
import rlmd.cli.main; M = sys.modules['rlmd.cli.main']
try: M._parser('run')
except TypeError: M._parser()
import rlmd.context, rlmd.config, rlmd.sandbox.process, rlmd.runner, rlmd.store, rlmd.engine.loop
s = rlmd.config.load(None)
print((time.process_time() - t0) * 1000, 'pathspec' in sys.modules, len(sys.modules))
'''
roots = sys.argv[2:]; reps = int(sys.argv[1]); res = {r: [] for r in roots}; info = {}
for i in range(reps):
    for r in (roots if i % 2 == 0 else roots[::-1]):
        out = subprocess.run([sys.executable, '-c', CODE], env=dict(os.environ, PYTHONPATH=r), capture_output=True, text=True, cwd='/tmp').stdout.split()
        res[r].append(float(out[0])); info[r] = out[1:]
for r in roots: print(f"{r:24s} import CPU median {statistics.median(res[r]):6.1f} ms (min {min(res[r]):.1f}); pathspec imported {info[r][0]}, modules {info[r][1]}")
print('load', os.getloadavg())
