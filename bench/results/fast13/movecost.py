import os, subprocess, time, statistics, threading, resource
base = "/sys/fs/cgroup/%s/rlmd/f13probe-%d"
cpu_w, wall_w, cpu_t = [], [], []
for i in range(30):
    p = subprocess.Popen(["sleep", "5"])
    paths = []
    for c in ("memory", "pids"):
        d = base % (c, i); os.mkdir(d); paths.append(d)
    t0, c0 = time.perf_counter(), time.thread_time()
    for d in paths:
        fd = os.open(d + "/cgroup.procs", os.O_WRONLY)
        os.write(fd, str(p.pid).encode()); os.close(fd)
    cpu_w.append(time.thread_time() - c0); wall_w.append(time.perf_counter() - t0)
    r0 = resource.getrusage(resource.RUSAGE_SELF); r0 = r0.ru_utime + r0.ru_stime
    th = threading.Thread(target=lambda: None); th.start(); th.join()
    r1 = resource.getrusage(resource.RUSAGE_SELF); cpu_t.append(r1.ru_utime + r1.ru_stime - r0)
    p.kill(); p.wait()
    time.sleep(0.05)
    for d in paths: os.rmdir(d)
    time.sleep(0.05)
m = lambda x: "median %.2f ms min %.2f ms" % (statistics.median(x) * 1e3, min(x) * 1e3)
print("two cgroup.procs writes: wall", m(wall_w), "| CPU of the writing thread", m(cpu_w))
print("a thread start + join: process CPU", m(cpu_t), "load", os.getloadavg()[0])
