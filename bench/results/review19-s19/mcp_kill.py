"""rlmd mcp / rlmd acp mid-task when the daemon is SIGKILLed: does the call end, and how?"""

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

home = Path("/work/s19/review19/h-mk")
home.mkdir(parents=True, exist_ok=True)
proj = "/work/s19/review19/proj-repr"
(home / "sleep.json").write_text(json.dumps(["```repl\nimport time\ntime.sleep(100)\n```"]))
(home / "config.toml").write_text(f'[run]\nmodel = "scripted:{home}/sleep.json"\n')
env = {**os.environ, "RLMD_HOME": str(home)}


def run(door_argv, msgs, call):
    d = subprocess.Popen(
        [sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / "d.log")], env=env
    )
    time.sleep(3)
    p = subprocess.Popen(
        [sys.executable, "-m", "rlmd", *door_argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )

    def send(m):
        p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()

    def wait_id(i, t):
        end = time.time() + t
        while time.time() < end:
            r, _, _ = select.select([p.stdout], [], [], 0.5)
            if r:
                line = p.stdout.readline()
                if not line:
                    return "EOF"
                m = json.loads(line)
                if "method" in m and "id" in m:
                    send({"jsonrpc": "2.0", "id": m["id"], "result": None})
                    continue
                if m.get("id") == i and "method" not in m:
                    return m
        return None

    sid = None
    for m in msgs:
        send(m)
        if "id" in m:
            r = wait_id(m["id"], 30)
            if isinstance(r, dict) and "sessionId" in json.dumps(r):
                sid = r["result"]["sessionId"]
    if sid:
        call["params"]["sessionId"] = sid
    send(call)
    time.sleep(5)
    t = time.time()
    d.send_signal(signal.SIGKILL)
    d.wait()
    r = wait_id(call["id"], 90)
    print(
        door_argv[0],
        "reply after",
        round(time.time() - t, 1),
        "s:",
        json.dumps(r)[:600] if r else r,
    )
    (home / "fin.json").write_text(
        json.dumps(["```repl\nprint(1)\n```", "```repl\nFINAL('one')\n```"])
    )
    (home / "config.toml").write_text(f'[run]\nmodel = "scripted:{home}/fin.json"\n')
    call2 = json.loads(json.dumps(call))
    call2["id"] = 50
    send(call2)
    r = wait_id(50, 60)
    print("  next call, no daemon:", json.dumps(r)[:300] if r else r)
    d = subprocess.Popen(
        [sys.executable, "-m", "rlmd", "serve", "--log-file", str(home / "d2.log")],
        env=env,
        stderr=subprocess.PIPE,
    )
    import socket as _s

    for _ in range(600):
        k = _s.socket(_s.AF_UNIX)
        try:
            k.connect(str(home / "run" / "rlmd.sock"))
            k.close()
            break
        except OSError:
            k.close()
            time.sleep(0.1)
    time.sleep(1)
    print(
        "  socket there:",
        (home / "run" / "rlmd.sock").exists(),
        "second daemon rc",
        d.poll(),
        d.stderr.read().decode()[-400:] if d.poll() is not None else "",
    )
    call2["id"] = 51
    send(call2)
    r = wait_id(51, 60)
    print("  next call, daemon restarted:", json.dumps(r)[:300] if r else r)
    d.terminate()
    d.wait()
    (home / "config.toml").write_text(f'[run]\nmodel = "scripted:{home}/sleep.json"\n')
    p.stdin.close()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        print("door did not exit")
    print("stderr:", p.stderr.read().decode()[-500:])


mcp_init = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]
run(
    ["mcp", "--no-start", "--workspace", proj],
    mcp_init,
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "ask", "arguments": {"question": "q"}},
    },
)
acp_init = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
    {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": proj, "mcpServers": []}},
]
# run(["acp", "--no-start"], acp_init, {"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId": None, "prompt":[{"type":"text","text":"q"}]}})
