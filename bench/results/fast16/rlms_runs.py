"""N rlms whole runs of bench 3's script (harness.rlms_whole_run: environment "local", the
scripted client); prints the median of rlms' own to-answer (execution_time) and of the whole call.
    PYTHONPATH=<checkout>:<checkout>/bench python rlms_runs.py N"""
import statistics, sys, time
import harness as h

script, _ = h.make_script([3] * 10 + [2] * 10, "rlms")
ans, whole = [], []
for i in range(int(sys.argv[1]) + 2):
    t = time.perf_counter()
    res, client, _ = h.rlms_whole_run(script, h.SMALL_CONTEXT)
    if i >= 2:
        whole.append(time.perf_counter() - t); ans.append(res.execution_time)
print(f"rlms n={len(ans)} to answer {statistics.median(ans)*1000:.2f} ms, whole call {statistics.median(whole)*1000:.1f} ms, load {open('/proc/loadavg').read().split()[0]}")
