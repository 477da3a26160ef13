"""Copy an rlmd checkout's kernel and add thread-CPU timers around the parts of a cell
(serve.py's request loop and Kernel.exec_cell); the kernel prints the per-cell means to
stderr at EOF. For measurement only: python instrument.py SRC_ROOT DST_ROOT."""
import shutil, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", ".git", ".venv", "node_modules"))
def patch(path, pairs):
    s = open(path).read()
    for old, new in pairs:
        assert old in s, (path, old[:60]); s = s.replace(old, new, 1)
    open(path, "w").write(s)
patch(f"{dst}/rlmd/kernel/core.py", [
    ("PREVIEW_CHARS = 80", "PREVIEW_CHARS = 80\nT = {}\ndef _t(k, v):\n    T[k] = T.get(k, 0.0) + v\n"),
    ('''        self._older_threads = _thread_ids() - {threading.get_native_id()}''',
     '''        _a = time.thread_time()\n        self._older_threads = _thread_ids() - {threading.get_native_id()}\n        _t("2 thread listing", time.thread_time() - _a); _a = time.thread_time()'''),
    ('''        self._final = None
        before = dict(self.ns)''', '''        self._final = None
        before = dict(self.ns)
        _t("3 capture set-up", time.thread_time() - _a)'''),
    ('''        parts = cells.split(code, filename)''', '''        _a = time.thread_time()\n        parts = cells.split(code, filename)\n        _t("4 compile (split)", time.thread_time() - _a)'''),
    ('''        duration = time.perf_counter() - t0
        restored = self.restore_reserved()''', '''        duration = time.perf_counter() - t0
        _a = time.thread_time()
        restored = self.restore_reserved()'''),
    ('''        return {
            "stdout": out.getvalue(),''', '''        _r = {
            "stdout": out.getvalue(),'''),
    ('''            "names": names,
            "duration_s": duration,
        }
''', '''            "names": names,
            "duration_s": duration,
        }
        _t("6 after the code (names, previews, result)", time.thread_time() - _a)
        return _r
'''),
])
patch(f"{dst}/rlmd/kernel/serve.py", [
    ('''    while True:
        req = channel.next_request()''', '''    import time as _tm, atexit as _ax
    T = core.T; _n = [0]
    def _dump():
        n = max(1, _n[0]); T2 = dict(T); T2.pop("reset", None); tot = T2.pop("0 whole", 0.0)
        run = T2.get("9 exec_cell", 0.0) - sum(v for k, v in T2.items() if k[0] in "2346")
        T2["5 running the code, capture on/off"] = run; T2.pop("9 exec_cell", None)
        lines = [f"{k}: {v / n * 1e6:.1f} us" for k, v in sorted(T2.items())]
        os.write(2, ("\\nPARTS n=%d whole %.1f us; " % (n, tot / n * 1e6) + "; ".join(lines) + "\\n").encode())
    while True:
        _a0 = _tm.thread_time()
        try:
            req = channel.next_request()
        except SystemExit:
            raise
        _a1 = _tm.thread_time(); core._t("1 reading the request", _a1 - _a0)'''),
    ('''                result = kernel.exec_cell(''', '''                _e0 = _tm.thread_time()
                result = kernel.exec_cell('''),
    ('''                channel.interrupt_pending = False''', '''                core._t("9 exec_cell", _tm.thread_time() - _e0); _e0 = _tm.thread_time()
                channel.interrupt_pending = False'''),
    ('''            resp = {"op": "done", "id": rid, "ok": True, "result": result}''', '''            if req.get("op") == "exec":
                core._t("7 end of cell (reap, sentinel check)", _tm.thread_time() - _e0)
            resp = {"op": "done", "id": rid, "ok": True, "result": result}'''),
    ('''        try:
            channel.send(resp)''', '''        try:
            _s0 = _tm.thread_time()
            channel.send(resp)
            if req.get("op") == "exec":
                _n[0] += 1; _s1 = _tm.thread_time()
                core._t("8 sending the reply", _s1 - _s0); core._t("0 whole", _s1 - _a0)
                if _n[0] == 200 and not T.get("reset"):
                    T.clear(); T["0 whole"] = 0.0; T["reset"] = 1.0; _n[0] = 0
                elif _n[0] % 1000 == 0 and T.get("reset"):
                    T.pop("reset"); _dump(); T["reset"] = 1.0'''),
])
# dump at EOF: _read_frame calls os._exit(0) at EOF; hook it
patch(f"{dst}/rlmd/kernel/serve.py", [
    ('''                if len(body) == n:
                    return self._protocol.decode(body)
        except BaseException:  # noqa: BLE001 - any failure here means the channel is gone
            pass
        os._exit(0)''', '''                if len(body) == n:
                    return self._protocol.decode(body)
        except BaseException:  # noqa: BLE001 - any failure here means the channel is gone
            pass
        os._exit(0)'''),
    ('''def main() -> None:''', '''_DUMP = [lambda: None]\n\n\ndef main() -> None:'''),
    ('''    T = core.T; _n = [0]''', '''    T = core.T; _n = [0]\n    _DUMP[0] = lambda: _dump()'''),
])
