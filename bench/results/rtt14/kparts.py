import sys, timeit, os
sys.path.insert(0, ".")
from rlmd.kernel import core, cells, protocol
k = core.Kernel(lambda fn, a: None, capture="global")
k.bind_context("The quick brown fox. " * 400)
CELL = "x = sum(range(100)); print(x)"
import io
real = sys.stdout
def run(stmt, n=5000):
    t = min(timeit.repeat(stmt, globals=globals(), number=n, repeat=5)); print(f"{stmt[:70]:72s} {t/n*1e6:7.2f} us", file=sys.stderr)
run("k.exec_cell(CELL)")
run("cells.split(CELL, '<cell-1>')")
run("compile(CELL, '<c>', 'exec', dont_inherit=True)")
run("compile('x = sum(range(100))', '<c>', 'exec', dont_inherit=True)")
run("compile('(print(x)\\n)', '<c>', 'single', dont_inherit=True)")
run("core._thread_ids()")
run("core.remember_source('<cell-1>', CELL)")
run("core.Capture(100000)")
run("dict(k.ns)")
run("k.restore_reserved()")
b = dict(k.ns)
run("k._changes(b)")
run("core.bounded_var_infos([('x', 4950)])")
res = k.exec_cell(CELL)
run("protocol.encode({'op': 'done', 'id': 5, 'ok': True, 'result': res})")
body = protocol.encode({'op':'exec','id':5,'code':CELL,'max_output':100000})[4:]
run("protocol.decode(body)")
print(len(k.ns), file=sys.stderr)
