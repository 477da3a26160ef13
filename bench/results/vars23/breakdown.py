"""Where the time of ``rlmd.workspace.variables`` goes for a REPL with many variables.

Run from the repository root (niced on a shared machine)::

    PYTHONPATH=$PWD .venv/bin/python bench/results/vars23/breakdown.py [--n 200000] [--reps 3]

Each step of the reply's path is timed on its own, in this process, best of ``--reps``:

kernel side (the kernel process; not the daemon's loop, but the workspace waits for it)
  ``kernel.list_vars``        every user variable's VarInfo (name, type, len, repr preview)
  ``kernel frame encode``     the ``done`` frame holding them, as the kernel sends it
daemon side (all of it on the event loop before this session)
  ``host frame decode``       :func:`rlmd.kernel.protocol.decode`, in the channel's callback
  ``VarInfo(**v)``            the session's objects
  ``v.__dict__`` list         the command's reply list
  ``run_command dumps+loads`` :meth:`RlmdServer.run_command`'s plain-JSON pass
  ``pygls send``              pygls' ``_send_data``: cattrs unstructure + ``json.dumps`` + encode
stopped workspace
  ``checkpoint load``         :func:`rlmd.workspace.checkpoint.load` (a thread) of N descriptions
  ``checkpoint list``         the reply list built from them (on the loop)

and, when the code has them, the paged path: ``kernel.list_vars_page`` of one page of ``--page``
(the sort + filter over all names, then previews of one page) and the daemon's share of it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from rlmd.kernel import protocol  # noqa: E402
from rlmd.kernel.core import Kernel  # noqa: E402
from rlmd.sandbox.base import VarInfo  # noqa: E402


def best(fn, reps: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def pygls_sender():
    """A real :class:`RlmdServer`'s protocol writing into a byte sink (no socket)."""
    from rlmd.server.protocol import RlmdServer

    class Sink:
        def __init__(self) -> None:
            self.n = 0

        def write(self, data: bytes) -> None:
            self.n += len(data)

        def close(self) -> None:
            pass

    class Conn:  # what RlmdServer reads from its connection at construction
        core = None

    server = RlmdServer(Conn())
    sink = Sink()
    server.protocol.set_writer(sink, include_headers=True)
    return server.protocol, sink


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--page", type=int, default=1000, help="page size of the paged path")
    args = ap.parse_args()
    n, reps = args.n, args.reps
    rows: list[tuple[str, float, str]] = []

    kernel = Kernel(lambda fn, a: None, capture="thread", workdir=tempfile.mkdtemp())
    kernel.exec_cell(f"for i in range({n}):\n    globals()[f'v{{i}}'] = i\ndel i\n")
    t, infos = best(kernel.list_vars, reps)
    assert len(infos) == n, len(infos)
    rows.append(("kernel.list_vars", t, f"{n:,} VarInfo dicts"))
    t, frame = best(
        lambda: protocol.encode({"op": "done", "id": 1, "ok": True, "result": infos}), reps
    )
    rows.append(("kernel frame encode", t, f"{len(frame):,} bytes"))
    body = frame[4:]
    t, msg = best(lambda: protocol.decode(body), reps)
    rows.append(("host frame decode", t, "on the loop (channel callback)"))
    t, objs = best(lambda: [VarInfo(**v) for v in msg["result"]], reps)
    rows.append(("VarInfo(**v)", t, "on the loop"))
    t, listed = best(lambda: [v.__dict__ for v in objs], reps)
    rows.append(("v.__dict__ list", t, "on the loop"))
    result = {"workspace": "/p", "source": "repl", "variables": listed, "not_restored": {}}
    t, plain = best(lambda: json.loads(json.dumps(result, default=str)), reps)
    rows.append(("run_command dumps+loads", t, "on the loop"))
    proto, sink = pygls_sender()
    t, _ = best(lambda: proto._send_response(1, result=plain), reps)
    rows.append(("pygls send", t, f"{sink.n // reps:,} bytes written, on the loop"))

    from rlmd.workspace import checkpoint as ckpt_mod

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = ckpt_mod.Checkpoint("/p")
        ckpt.variables = {
            v["name"]: {**{k: v[k] for k in ("type", "size", "preview")}, "bytes": 2} for v in infos
        }
        ckpt.values = b"{}"
        path = Path(tmp) / "checkpoint.json"
        try:
            ckpt_mod.save(ckpt, path)
        except Exception as exc:  # noqa: BLE001 - the API may differ; say so and go on
            print(f"(checkpoint write skipped: {exc!r})")
        else:
            t, saved = best(lambda: ckpt_mod.load(path), reps)
            rows.append(("checkpoint load", t, "in a thread (json of the descriptions)"))
            t, _ = best(
                lambda: [
                    {"name": k, "type": v["type"], "size": v["size"], "preview": v["preview"]}
                    for k, v in saved.variables.items()
                ],
                reps,
            )
            rows.append(("checkpoint list", t, "on the loop"))

    if hasattr(kernel, "list_vars_page"):
        from rlmd.sandbox.base import VarPage

        k = args.page
        t, page = best(lambda: kernel.list_vars_page({"offset": n // 2, "limit": k}), reps)
        rows.append(("kernel.list_vars_page", t, f"page of {len(page['variables'])} at {n // 2:,}"))
        frame = protocol.encode({"op": "done", "id": 1, "ok": True, "result": page})
        t, msg = best(lambda: protocol.decode(frame[4:]), reps)
        rows.append(("host decode (page)", t, f"on the loop, {len(frame):,} bytes"))
        t, vp = best(lambda: VarPage.from_kernel(msg["result"], n // 2, k), reps)
        rows.append(("VarPage.from_kernel (page)", t, "on the loop"))
        reply = {
            "workspace": "/p",
            "source": "repl",
            "variables": [v.__dict__ for v in vp.variables],
            "total": vp.total,
            "offset": vp.offset,
            "next_offset": vp.next_offset,
            "not_restored": {},
        }
        try:
            from rlmd.server.protocol import Reply
        except ImportError:  # before: the plain-JSON pass, then pygls' send
            t, plain = best(lambda: json.loads(json.dumps(reply, default=str)), reps)
            rows.append(("run_command dumps+loads (page)", t, "on the loop"))
            t, _ = best(lambda: proto._send_response(1, result=plain), reps)
            rows.append(("pygls send (page)", t, "on the loop"))
        else:  # one json.dumps (frame), as the notifications are sent
            t, _ = best(lambda: proto._send_response(1, result=Reply(reply)), reps)
            rows.append(("Reply send (page)", t, "on the loop"))
            t, _ = best(lambda: proto._send_response(1, result=Reply(result)), reps)
            rows.append(("Reply send (whole list)", t, "not on the loop: paged"))

    load = os.getloadavg()[0]
    print(f"{n:,} int variables, best of {reps}; load {load:.2f} on {os.cpu_count()} cores")
    loop_total = page_total = 0.0
    for name, t, note in rows:
        print(f"{name:<31}{t * 1e3:>10.1f} ms   {note}")
        if "on the loop" in note and "checkpoint" not in name:
            if "(page)" in name:
                page_total += t
            else:
                loop_total += t
    print(f"{'on the loop, whole list (before)':<31}{loop_total * 1e3:>10.1f} ms")
    if page_total:
        print(f"{'on the loop, one page':<31}{page_total * 1e3:>10.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
