"""ACP: session/new odd cwds, then a prompt of 300,000 characters; MCP ask with a 300,000-char question."""

import json
import os
import select
import subprocess
import sys
import time

home = "/work/s19/review19/h-acp"
os.makedirs(home, exist_ok=True)
proj = "/work/s19/review19/proj-repr"
open(home + "/config.toml", "w").write('[run]\nmodel = "scripted:/work/s19/review19/fin.json"\n')
env = {**os.environ, "RLMD_HOME": home}


def talk(argv, msgs, wait=60):
    p = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    out = []
    for m in msgs:
        p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()
        if "id" not in m:
            continue
        end = time.time() + wait
        got = None
        while time.time() < end and got is None:
            r, _, _ = select.select([p.stdout], [], [], 0.5)
            if r:
                line = p.stdout.readline()
                if not line:
                    break
                msg = json.loads(line)
                if msg.get("id") == m["id"] and "method" not in msg:
                    got = msg
                elif "method" in msg and "id" in msg:  # a request to the client: answer null
                    p.stdin.write(
                        (
                            json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": None}) + "\n"
                        ).encode()
                    )
                    p.stdin.flush()
        out.append(got)
        print(json.dumps(got)[:400] if got else f"NO REPLY to {m['method']}")
    p.stdin.close()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
    err = p.stderr.read().decode()
    print("stderr tail:", err[-600:])
    return out


acp = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}]
for i, cwd in enumerate(["/nonexistent", proj + "/a.py", "/tmp/a\u0000b", proj], start=2):
    acp.append(
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "session/new",
            "params": {"cwd": cwd, "mcpServers": []},
        }
    )
res = talk([sys.executable, "-m", "rlmd", "acp"], acp[:5])
sess = (res[-1] or {}).get("result", {}).get("sessionId")
print("session", sess)
talk(
    [sys.executable, "-m", "rlmd", "acp"],
    acp[:1]
    + [
        acp[4],
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "session/new",
            "params": {"cwd": proj, "mcpServers": []},
        },
    ],
)
print("=== big prompt")
big = "x " * 150_001
msgs = acp[:1] + [acp[4], None]
p1 = {
    "jsonrpc": "2.0",
    "id": 20,
    "method": "session/prompt",
    "params": {"sessionId": None, "prompt": [{"type": "text", "text": big}]},
}
# need the session id from the same process: run in one go with a placeholder filled after
p = subprocess.Popen(
    [sys.executable, "-m", "rlmd", "acp"],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    env=env,
)


def send(m):
    p.stdin.write((json.dumps(m) + "\n").encode())
    p.stdin.flush()


def wait_id(i, t=120):
    end = time.time() + t
    while time.time() < end:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            line = p.stdout.readline()
            if not line:
                return None
            m = json.loads(line)
            if "method" in m and "id" in m:
                send({"jsonrpc": "2.0", "id": m["id"], "result": None})
                continue
            if m.get("id") == i:
                return m
            if m.get("method") == "session/update":
                u = m["params"]["update"]
                if u.get("sessionUpdate") == "agent_message_chunk":
                    print("  chunk:", json.dumps(u)[:300])
    return None


send(acp[0])
wait_id(1)
send(acp[4])
sid = wait_id(5)["result"]["sessionId"]
p1["params"]["sessionId"] = sid
send(p1)
r = wait_id(20)
print("prompt reply:", json.dumps(r)[:500])
p.stdin.close()
p.wait(timeout=30)
print("stderr:", p.stderr.read().decode()[-800:])
