"""Blocking client to the real kernel (plain, no isolation): wall and kernel CPU per cell."""
import os, subprocess, sys, time, json
root = os.environ.get("ROOT", ".")
sys.path.insert(0, root)
from rlmd.sandbox.process.launch import kernel_argv
from rlmd.kernel import protocol
CELL = os.environ.get("CELL", "x = sum(range(100)); print(x)")
p = subprocess.Popen(kernel_argv(sys.executable), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, cwd="/tmp")
r, w = p.stdout.fileno(), p.stdin.fileno()
import threading
_err = []
threading.Thread(target=lambda: _err.append(p.stderr.read()), daemon=True).start()
def read(k):
    b = b""
    while len(b) < k:
        c = os.read(r, k - len(b)); assert c; b += c
    return b
def frame():
    return protocol.decode(read(int.from_bytes(read(4), "big")))
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
assert frame()["op"] == "hello"
n = int(sys.argv[1])
ts = []
for i in range(n + 200):
    if i == 200: k0, h0 = cpu(p.pid), time.process_time()
    t0 = time.perf_counter()
    os.write(w, protocol.encode({"op": "exec", "id": i + 1, "code": CELL, "max_output": 100000}))
    while True:
        m = frame()
        if m["op"] == "done": break
    ts.append(time.perf_counter() - t0)
ts = sorted(ts[200:])
print(f"blocking: median {ts[n//2]*1e6:.0f} us min {ts[0]*1e6:.0f} kernel cpu {(cpu(p.pid)-k0)/n*1e6:.0f} us client cpu {(time.process_time()-h0)/n*1e6:.0f} us load {os.getloadavg()[0]:.2f}")
p.stdin.close(); p.wait(); import time as _t; _t.sleep(0.2); err = b"".join(_err).decode(); print(err[err.rfind("PARTS"):].split("\n")[0] if "PARTS" in err else "")
