import sys, timeit, os, threading
sys.path.insert(0, ".")
from rlmd.kernel import core, serve, protocol
def run(stmt, n=20000, g=None):
    t = min(timeit.repeat(stmt, globals=g or globals(), number=n, repeat=5)); print(f"{stmt[:70]:72s} {t/n*1e6:7.2f} us")
run("core.preview(4950)")
run("core.var_info('x', 4950)")
run("core.size_of(4950)")
run("core.Capture(100000)")
run("threading.Lock()")
run("serve._pending_bytes(2)")
run("serve._fd_identity(2)")
run("sys.__stdout__.flush(); sys.__stderr__.flush()")
run("os.getpid()")
run("protocol.sentinel('abcdef0123456789', 5)")
