import resource, statistics, subprocess, sys
from rlmd.sandbox.process.launch import kernel_argv, compile_kernel
compile_kernel()
argv = list(kernel_argv(sys.executable))
def ch():
    r = resource.getrusage(resource.RUSAGE_CHILDREN); return r.ru_utime + r.ru_stime
res = {"bare": [], "kernel": []}
for i in range(20):
    for name, cmd in (("bare", [sys.executable, "-I", "-S", "-c", "pass"]), ("kernel", argv)):
        c = ch(); subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL); res[name].append((ch() - c) * 1000)
for k, v in res.items(): print(k, "CPU ms median", round(statistics.median(v), 2))
print(argv)
