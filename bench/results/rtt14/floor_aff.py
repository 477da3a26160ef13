"""Raw pipe floor with the child on the same CPU as the parent, or on the other one."""
import os, sys, subprocess, statistics, time, json
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import sandbox_speed as s
def run(cpu_parent, cpu_child, n=400):
    os.sched_setaffinity(0, {cpu_parent})
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", s.FLOOR_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    if cpu_child is not None: os.sched_setaffinity(proc.pid, {cpu_child})
    w, r = proc.stdin.fileno(), proc.stdout.fileno()
    def read(k):
        b = b""
        while len(b) < k: b += os.read(r, k - len(b))
        return b
    ts = []
    for i in range(n + 50):
        body = json.dumps({"op": "exec", "id": i, "code": s.CELL}).encode()
        t0 = time.perf_counter(); os.write(w, len(body).to_bytes(4, "big") + body)
        json.loads(read(int.from_bytes(read(4), "big"))); ts.append(time.perf_counter() - t0)
    proc.stdin.close(); proc.wait()
    return statistics.median(ts[50:]) * 1e6
for rep in range(2):
    print(f"same cpu 0: {run(0, 0):.0f} us; same cpu 1: {run(1, 1):.0f} us; cross 0->1: {run(0, 1):.0f} us; cross 1->0: {run(1, 0):.0f} us; unpinned: ", end="")
    os.sched_setaffinity(0, {0, 1})
    proc_t = s.pipe_floor(400, 50); print(f"{statistics.median(proc_t)*1e6:.0f} us  load {os.getloadavg()[0]:.2f}")
