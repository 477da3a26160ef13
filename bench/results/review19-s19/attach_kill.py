import json, os, subprocess, sys, time, signal

home = "/work/s19/review19/h-att"
os.makedirs(home, exist_ok=True)
env = {**os.environ, "RLMD_HOME": home}
p = subprocess.Popen(
    [sys.executable, "-m", "rlmd", "attach", "--stdio"],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    env=env,
)
body = json.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
).encode()
p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
p.stdin.flush()
head = p.stdout.readline()
print("got", head[:40])
time.sleep(1)
pid = int(open(home + "/run/daemon.pid").read().split()[0])
print("daemon pid", pid)
os.kill(pid, signal.SIGKILL)
t = time.time()
try:
    rc = p.wait(timeout=30)
    print(
        "attach exited rc",
        rc,
        "after",
        round(time.time() - t, 1),
        "s; stderr:",
        p.stderr.read().decode()[-300:],
    )
except subprocess.TimeoutExpired:
    print("attach still running 30 s after the daemon died")
    p.kill()
