import os, sys, time
sys.path.insert(0, os.path.join(os.environ.get("CHECKOUT", "."), "rlmd"))  # rlmd/kernel as package "kernel"
from kernel import core, cells
code = ('part = context[0:100]\na0 = llm_query("Q 0.0 about: " + part)\n'
        'a1 = llm_query("Q 0.1 about: " + part)\na2 = llm_query("Q 0.2 about: " + part)\n'
        'print("iteration 0", len(part), a0, a1, a2)')
def bench(f, n=5000):
    for _ in range(200): f()
    t = time.thread_time_ns()
    for _ in range(n): f()
    return (time.thread_time_ns() - t) / n / 1e3
print("cells.split %.1f us" % bench(lambda: cells.split(code, "<cell-1>")))
print("compile whole exec %.1f us" % bench(lambda: compile(code, "<cell-1>", "exec", dont_inherit=True)))
k = core.Kernel(lambda fn, args: "ok", capture="global")
k.bind_context("The quick brown fox jumps over the lazy dog. " * 200)
print("exec_cell %.1f us" % bench(lambda: k.exec_cell(code)))
print("exec_cell bare %.1f us" % bench(lambda: k.exec_cell("x = 1")))
