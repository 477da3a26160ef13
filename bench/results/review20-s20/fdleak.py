"""Count this process's fds before and after 50 subprocess-sandbox restarts, with the cell
clock's /proc reading used each time (a sub-call cell), and kernels killed from outside."""
import asyncio, os, signal, sys
sys.path.insert(0, "tests")
from helpers.sandbox_host import FakeHost, ok
from rlmd.sandbox import create_sandbox

def fds():
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return out

async def main(n: int) -> None:
    box = create_sandbox("subprocess")
    await box.start(FakeHost())
    await ok(box, "llm_query('x')")
    before = fds()
    seen, errs = set(), []
    for i in range(n):
        if i % 2:
            pid = (await box.health())["host_pid"]
            os.kill(pid, signal.SIGKILL)  # killed from outside
            r = await box.execute("llm_query('y')")
            if r.error is None:
                await box.restart()
        else:
            r = None
            await box.restart()
        await ok(box, "llm_query('x')")
        seen.update(v for v in fds().values() if v.endswith('/stat'))
        errs.append(r.error is not None if i % 2 else None)
    print("distinct stat targets", len(seen), "killed cells that errored", sum(bool(e) for e in errs))
    after = fds()
    await box.close()
    closed = fds()
    new = {k: v for k, v in after.items() if k not in before}
    print("before", len(before), "after", len(after), "after close", len(closed))
    print("new:", sorted(set(new.values()))[:20])
    print("stat fds open after close:", [v for v in closed.values() if v.endswith('/stat')])

asyncio.run(main(int(sys.argv[1])))
