"""Odd JSON-RPC messages over rlmd serve --stdio, one process; each should get one answer."""

import json
import os
import select
import subprocess
import sys
import time

home = "/work/s19/review19/h-fuzz"
os.makedirs(home, exist_ok=True)
p = subprocess.Popen(
    [sys.executable, "-m", "rlmd", "serve", "--stdio"],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    stderr=open(home + "/err.log", "wb"),
    env={**os.environ, "RLMD_HOME": home},
)


def send(body: bytes, header: bytes | None = None):
    h = header if header is not None else b"Content-Length: %d\r\n\r\n" % len(body)
    p.stdin.write(h + body)
    p.stdin.flush()


buf = b""


def read(timeout=10):
    global buf
    end = time.time() + timeout
    while time.time() < end:
        if b"\r\n\r\n" in buf:
            head, rest = buf.split(b"\r\n\r\n", 1)
            n = int(
                [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][
                    0
                ].split(b":")[1]
            )
            if len(rest) >= n:
                buf = rest[n:]
                return json.loads(rest[:n])
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                return "EOF"
            buf += chunk
    return None


def cmd(i, name, args):
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": i,
            "method": "workspace/executeCommand",
            "params": {"command": name, "arguments": args},
        }
    ).encode()


cases = [
    (
        "big int id",
        json.dumps(
            {"jsonrpc": "2.0", "id": 2**70, "method": "rlmd/nothing", "params": {}}
        ).encode(),
    ),
    (
        "id -0",
        b'{"jsonrpc":"2.0","id":-0,"method":"workspace/executeCommand","params":{"command":"rlmd.health"}}',
    ),
    (
        "float 1.0 id",
        b'{"jsonrpc":"2.0","id":1.0,"method":"workspace/executeCommand","params":{"command":"rlmd.health"}}',
    ),
    ("command not str", cmd(3, 42, [])),
    (
        "arguments dict",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "workspace/executeCommand",
                "params": {"command": "rlmd.health", "arguments": {"a": 1}},
            }
        ).encode(),
    ),
    ("two arguments", cmd(5, "rlmd.task.list", [{}, {}])),
    ("argument null", cmd(6, "rlmd.task.list", [None])),
    ("argument list", cmd(7, "rlmd.task.list", [[1]])),
    ("unknown command", cmd(8, "rlmd.nope", [])),
    (
        "question NUL",
        cmd(
            9,
            "rlmd.task.start",
            [
                {
                    "workspace": "/work/s19/review19/proj-repr",
                    "question": "a\u0000b",
                    "models": {"root": "scripted:/nonexistent.json"},
                }
            ],
        ),
    ),
    (
        "by_depth huge key",
        cmd(
            10,
            "rlmd.task.start",
            [
                {
                    "workspace": "/work/s19/review19/proj-repr",
                    "question": "q",
                    "models": {"by_depth": {"99999999999999999999": "x"}},
                }
            ],
        ),
    ),
    (
        "by_depth neg key",
        cmd(
            11,
            "rlmd.task.start",
            [
                {
                    "workspace": "/work/s19/review19/proj-repr",
                    "question": "q",
                    "models": {"by_depth": {"-1": "x"}},
                }
            ],
        ),
    ),
    (
        "models not obj",
        cmd(
            12,
            "rlmd.task.start",
            [{"workspace": "/work/s19/review19/proj-repr", "question": "q", "models": "x"}],
        ),
    ),
    (
        "budget bool",
        cmd(
            13,
            "rlmd.task.start",
            [
                {
                    "workspace": "/work/s19/review19/proj-repr",
                    "question": "q",
                    "budgets": {"max_iterations": True},
                }
            ],
        ),
    ),
    (
        "budget 1e400",
        b'{"jsonrpc":"2.0","id":14,"method":"workspace/executeCommand","params":{"command":"rlmd.task.start","arguments":[{"workspace":"/work/s19/review19/proj-repr","question":"q","budgets":{"max_seconds":1e400}}]}}',
    ),
    (
        "budget NaN",
        b'{"jsonrpc":"2.0","id":15,"method":"workspace/executeCommand","params":{"command":"rlmd.task.start","arguments":[{"workspace":"/work/s19/review19/proj-repr","question":"q","budgets":{"max_seconds":NaN}}]}}',
    ),
    (
        "exec timeout NaN",
        b'{"jsonrpc":"2.0","id":16,"method":"workspace/executeCommand","params":{"command":"rlmd.workspace.exec","arguments":[{"workspace":"/work/s19/review19/proj-repr","code":"1","timeout_s":NaN}]}}',
    ),
    ("runs.list limit huge", cmd(17, "rlmd.runs.list", [{"limit": 10**30}])),
    ("runs.list offset neg", cmd(18, "rlmd.runs.list", [{"offset": -5}])),
    ("runs.get prefix empty", cmd(19, "rlmd.runs.get", [{"run_id": ""}])),
    ("runs.get prefix %", cmd(20, "rlmd.runs.get", [{"run_id": "%"}])),
    ("task.status _", cmd(21, "rlmd.task.status", [{"run_id": "_"}])),
    ("subscribe odd", cmd(22, "rlmd.subscribe", [{"events": "all", "runs": 5}])),
    (
        "initialize weird opts",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 23,
                "method": "initialize",
                "params": {
                    "capabilities": {},
                    "initializationOptions": {"events": "loud", "progress": 7},
                },
            }
        ).encode(),
    ),
    ("workspace NUL path", cmd(24, "rlmd.workspace.open", [{"workspace": "/tmp/a\u0000b"}])),
    (
        "workspace file:// odd",
        cmd(25, "rlmd.workspace.open", [{"workspace": "file://otherhost/etc"}]),
    ),
    (
        "exec code NUL",
        cmd(
            26,
            "rlmd.workspace.exec",
            [{"workspace": "/work/s19/review19/proj-repr", "code": "x=1\u0000"}],
        ),
    ),
    (
        "exec code surrogate",
        b'{"jsonrpc":"2.0","id":27,"method":"workspace/executeCommand","params":{"command":"rlmd.workspace.exec","arguments":[{"workspace":"/work/s19/review19/proj-repr","code":"x=\\"\\ud800\\""}]}}',
    ),
    (
        "question surrogate",
        b'{"jsonrpc":"2.0","id":28,"method":"workspace/executeCommand","params":{"command":"rlmd.task.start","arguments":[{"workspace":"/work/s19/review19/proj-repr","question":"\\udc80","models":{"root":"scripted:/work/s19/review19/fin.json"}}]}}',
    ),
    (
        "runs.list search surrogate",
        b'{"jsonrpc":"2.0","id":29,"method":"workspace/executeCommand","params":{"command":"rlmd.runs.list","arguments":[{"search":"\\ud800"}]}}',
    ),
    (
        "runs.list workspace surrogate",
        b'{"jsonrpc":"2.0","id":30,"method":"workspace/executeCommand","params":{"command":"rlmd.runs.list","arguments":[{"workspace":"/x\\ud800"}]}}',
    ),
    (
        "dup keys",
        b'{"jsonrpc":"2.0","id":31,"id":32,"method":"workspace/executeCommand","params":{"command":"rlmd.health"}}',
    ),
    (
        "$/cancelRequest unknown",
        b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":999}}',
    ),
    (
        "$/cancelRequest bad",
        b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":{"a":1}}}',
    ),
    ("health", cmd(99, "rlmd.health", [])),
]
for name, body in cases:
    send(body)
    r = read(20 if name.startswith(("question", "exec")) else 5)
    s = json.dumps(r)[:260] if r not in (None, "EOF") else r
    print(f"{name:28} -> {s}")
    # drain notifications
    while True:
        x = read(0.3)
        if x in (None, "EOF"):
            break
        if isinstance(x, dict) and "id" in x and "method" not in x:
            print(f"{'   (later reply)':28} -> {json.dumps(x)[:200]}")
p.stdin.close()
p.wait(timeout=30)
print("rc", p.returncode)
print(open(home + "/err.log").read()[-2500:])
