"""Issue 16 item 4: does a host reader that avoids asyncio's per-message path get a round trip
closer to the raw pipe? Same echo child (bench/sandbox_speed.py FLOOR_CHILD), five hosts,
alternating rounds, medians in microseconds. Session 23."""
import asyncio, json, os, statistics, subprocess, sys, threading, time
sys.path.insert(0, "/work/main")
from bench.sandbox_speed import FLOOR_CHILD, CELL

N, WARM, ROUNDS = 2000, 200, int(sys.argv[1]) if len(sys.argv) > 1 else 5

def child():
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", FLOOR_CHILD],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

def frame(i):
    body = json.dumps({"op": "exec", "id": i, "code": CELL}).encode()
    return len(body).to_bytes(4, "big") + body

def blocking_read(r, k):
    buf = b""
    while len(buf) < k:
        c = os.read(r, k - len(buf))
        if not c: raise EOFError
        buf += c
    return buf

def host_blocking():
    p = child(); w, r = p.stdin.fileno(), p.stdout.fileno(); s = []
    for i in range(N + WARM):
        t0 = time.perf_counter(); os.write(w, frame(i))
        rep = json.loads(blocking_read(r, int.from_bytes(blocking_read(r, 4), "big")))
        dt = time.perf_counter() - t0; assert rep["id"] == i
        if i >= WARM: s.append(dt)
    p.stdin.close(); p.wait(); return s

async def host_streams():
    p = await asyncio.create_subprocess_exec(sys.executable, "-I", "-S", "-c", FLOOR_CHILD,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    s = []
    for i in range(N + WARM):
        t0 = time.perf_counter(); p.stdin.write(frame(i))
        head = await p.stdout.readexactly(4)
        rep = json.loads(await p.stdout.readexactly(int.from_bytes(head, "big")))
        dt = time.perf_counter() - t0; assert rep["id"] == i
        if i >= WARM: s.append(dt)
    p.stdin.close(); await p.wait(); return s

async def host_add_reader():
    """Loop's own reader callback on the raw fd, frames parsed in place, a future per message."""
    loop = asyncio.get_running_loop(); p = child(); w, r = p.stdin.fileno(), p.stdout.fileno()
    os.set_blocking(r, False); buf = bytearray(); waiter = [None]
    def on_readable():
        buf.extend(os.read(r, 1 << 16))
        if len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big")
            if len(buf) >= 4 + n:
                body = bytes(buf[4:4 + n]); del buf[:4 + n]
                waiter[0].set_result(body)
    loop.add_reader(r, on_readable); s = []
    for i in range(N + WARM):
        waiter[0] = loop.create_future()
        t0 = time.perf_counter(); os.write(w, frame(i))
        rep = json.loads(await waiter[0])
        dt = time.perf_counter() - t0; assert rep["id"] == i
        if i >= WARM: s.append(dt)
    loop.remove_reader(r); p.stdin.close(); p.wait(); return s

async def host_reader_thread():
    """A blocking reader thread hands each frame to the loop (call_soon_threadsafe)."""
    loop = asyncio.get_running_loop(); p = child(); w, r = p.stdin.fileno(), p.stdout.fileno()
    waiter = [None]
    def reader():
        try:
            while True:
                body = blocking_read(r, int.from_bytes(blocking_read(r, 4), "big"))
                fut = waiter[0]
                loop.call_soon_threadsafe(fut.set_result, body)
        except EOFError:
            pass
    t = threading.Thread(target=reader, daemon=True); t.start(); s = []
    for i in range(N + WARM):
        waiter[0] = loop.create_future()
        t0 = time.perf_counter(); os.write(w, frame(i))
        rep = json.loads(await waiter[0])
        dt = time.perf_counter() - t0; assert rep["id"] == i
        if i >= WARM: s.append(dt)
    p.stdin.close(); t.join(); p.wait(); return s

async def host_to_thread():
    """The whole round trip (write + blocking read) in a worker thread, awaited."""
    p = child(); w, r = p.stdin.fileno(), p.stdout.fileno(); s = []
    def rt(i):
        os.write(w, frame(i))
        return blocking_read(r, int.from_bytes(blocking_read(r, 4), "big"))
    loop = asyncio.get_running_loop()
    for i in range(N + WARM):
        t0 = time.perf_counter()
        rep = json.loads(await loop.run_in_executor(None, rt, i))
        dt = time.perf_counter() - t0; assert rep["id"] == i
        if i >= WARM: s.append(dt)
    p.stdin.close(); p.wait(); return s

HOSTS = {"blocking (floor)": lambda: host_blocking(),
         "asyncio streams": lambda: asyncio.run(host_streams()),
         "asyncio add_reader": lambda: asyncio.run(host_add_reader()),
         "reader thread": lambda: asyncio.run(host_reader_thread()),
         "to_thread round trip": lambda: asyncio.run(host_to_thread())}

res = {k: [] for k in HOSTS}
print("load", os.getloadavg())
for rnd in range(ROUNDS):
    order = list(HOSTS) if rnd % 2 == 0 else list(HOSTS)[::-1]
    for k in order:
        res[k].append(statistics.median(HOSTS[k]()) * 1e6)
print("load", os.getloadavg())
floor = statistics.median(res["blocking (floor)"])
for k, v in res.items():
    m = statistics.median(v)
    print(f"{k:<22} median of round medians {m:7.1f} us  rounds {[round(x) for x in v]}  {m / floor:.2f}x floor")
