"""Host CPU per execute with the kernel replaced by an instant loop-back (no IPC)."""
import asyncio, os, sys, time, cProfile, pstats
sys.path.insert(0, os.environ.get("ROOT", "."))
from rlmd.sandbox import create_sandbox
from rlmd.kernel import protocol
CELL = "x = sum(range(100)); print(x)"
async def host(fn, args): return "ok"
async def main():
    box = create_sandbox("subprocess")
    await box.start(host)
    r = await box.execute(CELL)
    k = box.kernel
    loop = asyncio.get_running_loop()
    res = {"stdout": "4950\n", "stderr": "", "error": None, "final": None, "variables": [{"name": "x", "type": "int", "size": None, "preview": "4950"}], "restored": [], "names": ["x"], "duration_s": 1e-5, "sentinel": False}
    def send(data):
        rid = protocol.decode(data[4:])["id"]
        out = protocol.encode({"op": "done", "id": rid, "ok": True, "result": res})
        loop.call_soon(k._on_frames, out)
    k.send = send
    n = int(sys.argv[1])
    for _ in range(500): await box.execute(CELL)
    prof = cProfile.Profile() if os.environ.get("PROF") else None
    if prof: prof.enable()
    t0 = time.process_time()
    for _ in range(n):
        r = await box.execute(CELL)
    dt = (time.process_time() - t0) / n
    if prof:
        prof.disable(); pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    print(f"host CPU per execute (loop-back): {dt*1e6:.1f} us")
    del k.send
    await box.close()
asyncio.run(main())
