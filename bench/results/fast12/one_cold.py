"""One warm-up cold start, then a marker write, then one cold start (for strace -f -ttt)."""

import asyncio
import os
import sys
import time

from rlmd.sandbox import create_sandbox


async def _host(fn, args):
    return "ok"


async def once():
    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(_host)
    r = await box.execute("x = 1")
    assert r.error is None
    await box.close()


async def main():
    await once()
    await asyncio.sleep(0.3)
    os.write(2, b"MARK-START\n")
    t0 = time.perf_counter()
    box = create_sandbox("subprocess", spare_kernel=False)
    await box.start(_host)
    os.write(2, b"MARK-STARTED\n")
    await box.execute("x = 1")
    os.write(2, b"MARK-CELL\n")
    print(f"cold {1e3 * (time.perf_counter() - t0):.1f} ms", file=sys.stderr)
    await box.close()


asyncio.run(main())
