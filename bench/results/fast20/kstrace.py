import asyncio, os, subprocess, sys, time
from rlmd.sandbox import create_sandbox
CODE = sys.argv[1]
async def main():
    sb = create_sandbox("subprocess")
    async def h(fn, a): return "ok"
    await sb.start(h)
    await sb.load_context("The quick brown fox jumps over the lazy dog. " * 200)
    pid = (await sb.health())["host_pid"]
    for _ in range(20): await sb.execute(CODE)
    st = subprocess.Popen(["strace", "-f", "-c", "-o", "strace.txt", "-p", str(pid)])
    await asyncio.sleep(1.0)
    for _ in range(200): await sb.execute(CODE)
    st.send_signal(2); st.wait()
    await sb.close()
asyncio.run(main())
