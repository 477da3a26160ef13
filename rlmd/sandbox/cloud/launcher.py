"""Starts the kernel inside a cloud VM with its limits set from outside model code.

``python3 -I launcher.py CONFIG_JSON MAIN_PY [kernel args...]`` with ``CONFIG_JSON`` =
``{"dirs": [paths], "cwd": path, "rlimits": {"RLIMIT_AS": bytes, ...}, "report": path}``:
creates ``dirs`` and enters ``cwd`` (saving the host a round trip to the VM); makes the
process a session (and process group) leader, so the host can kill the kernel and everything
it forks with one signal to the group; lowers the rlimits; writes ``{"applied": [names],
"failed": {name: reason}}`` to ``report``; then starts the kernel as its child and waits.

It exits with the kernel's exit code, or ``128 + N`` when signal ``N`` ended the kernel: the
providers report exit codes their own ways (E2B's envd says -1 for any signal), so this
shell convention is how the host learns that, say, the CPU limit (``SIGXCPU``) ended the
kernel. ``SIGINT`` is ignored here: an interrupt is for the kernel only. Standard library
only: this file runs in the VM.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys


def apply_limits(limits: dict[str, int]) -> dict[str, object]:
    """Set each ``RLIMIT_*`` in ``limits`` (soft = hard = value, never above the current hard
    limit; for ``RLIMIT_CPU`` the hard limit is one second later, so the kernel first gets
    ``SIGXCPU``, which the host can name, before ``SIGKILL``). Returns ``{"applied": [names],
    "failed": {name: reason}}``."""
    applied: list[str] = []
    failed: dict[str, str] = {}
    for name, value in sorted(limits.items()):
        which = getattr(resource, name, None)
        if which is None:
            failed[name] = "unknown on this system"
            continue
        _, hard = resource.getrlimit(which)
        value = int(value)
        top = value + 1 if name == "RLIMIT_CPU" else value
        if hard != resource.RLIM_INFINITY:
            value, top = min(value, hard), min(top, hard)
        try:
            resource.setrlimit(which, (value, top))
            applied.append(name)
        except (ValueError, OSError) as exc:
            failed[name] = str(exc)
    return {"applied": applied, "failed": failed}


def main() -> None:
    config, main_py = json.loads(sys.argv[1]), sys.argv[2]
    for folder in config.get("dirs", []):
        os.makedirs(folder, exist_ok=True)
    if config.get("cwd"):
        os.chdir(config["cwd"])
    try:
        os.setsid()
    except OSError:
        pass  # already a group leader
    result = apply_limits(config.get("rlimits", {}))
    if config.get("report"):
        with open(config["report"], "w", encoding="utf-8") as f:
            json.dump(result, f)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        # An ignored SIGINT would survive exec and stop Python raising KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execv(sys.executable, [sys.executable, "-I", main_py, *sys.argv[3:]])
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
