"""Codebase to first model request: ``rlmd run --context <folder>`` against reading the folder.

Run: ``.venv/bin/python bench/codebase_load.py [--folder DIR] [--reps 3]`` (about 30 s on 2
cores). Prints a table and writes ``bench/out/codebase_load.json``; exits non-zero when the
target is missed or a run did not answer.

What is measured, each as a fresh process started the same way (``sys.executable``), so
interpreter start-up is in both:

* **rlmd**: ``python -m rlmd run q --context DIR --model scripted:<file>:first`` from
  ``Popen`` to the first model request (the scripted model writes ``time.time()`` when it
  is first called): imports, the walk with ``.gitignore`` rules, reading and decoding,
  the token count for the root model's metadata, the sandbox's start and the codebase
  bound in it. rlmd's bytecode is compiled first (``compileall``), as an installed rlmd's
  is. The run then ends (one cell calls ``FINAL``), checked outside the timing.
* **floor**: ``python -c <read every file>``: ``os.walk`` and ``open().read()`` of the same
  files, decoded as UTF-8 when they are text (what any loader must do at least).

The folder defaults to a copy of this interpreter's standard library without
``site-packages`` and ``__pycache__`` (CPython 3.11: 2,450 files, 104 MB). **Target:** rlmd
median <= 3x the floor's median (issue 16).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 3.0

MODEL = """
import os, time

def first(messages):
    with open(os.environ["RLMD_BENCH_MARK"], "a") as fh:
        fh.write(f"{time.time()}\\n")
    return "```repl\\n_n = len(context)\\nFINAL('ok')\\n```"
"""

FLOOR = """
import os, sys
n = 0
for dirpath, dirnames, filenames in os.walk(sys.argv[1]):
    for name in filenames:
        with open(os.path.join(dirpath, name), "rb") as fh:
            data = fh.read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        n += 1
print(n)
"""


def stdlib_copy(dest: Path) -> Path:
    src = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(
        src, dest, ignore=shutil.ignore_patterns("site-packages", "__pycache__"), symlinks=True
    )
    return dest


def time_rlmd(folder: Path, work: Path, env: dict[str, str]) -> tuple[float, dict]:
    mark = work / "first-request"
    mark.unlink(missing_ok=True)
    model = work / "bench_model.py"
    cmd = [sys.executable, "-m", "rlmd", "run", "Say ok.", "--context", str(folder)]
    cmd += ["--model", f"scripted:{model}:first", "--json", "--quiet"]
    t0 = time.time()
    proc = subprocess.run(  # cwd: not a checkout, so -m rlmd imports --rlmd-root's
        cmd, capture_output=True, text=True, env={**env, "RLMD_BENCH_MARK": str(mark)}, cwd=work
    )
    out = json.loads(proc.stdout or "{}") if proc.returncode == 0 else {}
    if out.get("answer") != "ok" or not mark.exists():
        raise SystemExit(f"rlmd run did not answer: rc {proc.returncode}\n{proc.stderr[-3000:]}")
    return float(mark.read_text().split()[0]) - t0, out


def time_floor(folder: Path, env: dict[str, str]) -> tuple[float, int]:
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", FLOOR, str(folder)], capture_output=True, text=True, env=env
    )
    return time.time() - t0, int(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, help="the codebase (default: a stdlib copy)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--rlmd-root", type=Path, default=ROOT, help="the rlmd checkout to time (before/after)"
    )
    ap.add_argument(
        "--before",
        type=Path,
        help="another rlmd checkout timed in the same interleaved repetitions (before/after)",
    )
    args = ap.parse_args()
    load0 = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="rlmd-codebase-load-"))
    try:
        folder = args.folder or stdlib_copy(work / "stdlib")
        (work / "bench_model.py").write_text(MODEL)
        (work / "home").mkdir()
        env = {
            **os.environ,
            "RLMD_HOME": str(work / "home"),
            "PYTHONPATH": os.pathsep.join([str(args.rlmd_root), os.environ.get("PYTHONPATH", "")]),
        }
        # An installed rlmd has its bytecode compiled (pip does it); a checkout run with
        # PYTHONDONTWRITEBYTECODE=1 would compile ~0.5 s of sources in every timed process.
        roots = [args.rlmd_root] + ([args.before] if args.before else [])
        for root in roots:
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(root / "rlmd")],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        before_env = {
            **env,
            "PYTHONPATH": os.pathsep.join([str(args.before), os.environ.get("PYTHONPATH", "")]),
        }
        time_floor(folder, env)  # warm the page cache for both
        rlmd_s, floor_s, before_s, files = [], [], [], 0
        for _ in range(args.reps):  # interleaved, so drift hits both alike
            s, files = time_floor(folder, env)
            floor_s.append(s)
            s, out = time_rlmd(folder, work, env)
            rlmd_s.append(s)
            if args.before:
                before_s.append(time_rlmd(folder, work, before_env)[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rlmd_med, floor_med = statistics.median(rlmd_s), statistics.median(floor_s)
    ratio = rlmd_med / floor_med
    met = ratio <= TARGET_RATIO
    report = {
        "folder": str(args.folder or "stdlib copy"),
        "files": files,
        "rlmd_to_first_request_s": rlmd_s,
        "floor_read_s": floor_s,
        "ratio": round(ratio, 2),
        "target_ratio": TARGET_RATIO,
        "met": met,
        "before_root": str(args.before) if args.before else None,
        "before_to_first_request_s": before_s,
        "load_average_at_start": load0,
        "cpus": os.cpu_count(),
    }
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    (ROOT / "bench" / "out" / "codebase_load.json").write_text(json.dumps(report, indent=1))
    print(
        f"codebase: {report['folder']} ({files} files), {args.reps} repetitions, "
        f"rlmd from {args.rlmd_root}"
    )
    print(f"{'':<34}{'median s':>10}{'min s':>8}")
    print(f"{'rlmd run -> first model request':<34}{rlmd_med:>10.2f}{min(rlmd_s):>8.2f}")
    print(f"{'floor: read every file (python)':<34}{floor_med:>10.2f}{min(floor_s):>8.2f}")
    if before_s:
        before_med = statistics.median(before_s)
        print(
            f"{'before: ' + args.before.name:<34}{before_med:>10.2f}{min(before_s):>8.2f}"
            f"   (ratio {before_med / floor_med:.2f})"
        )
    print(
        f"ratio rlmd / floor {ratio:.2f} (target <= {TARGET_RATIO:g}): {'met' if met else 'MISSED'}"
        f"; load average at start {load0[0]:.2f} on {os.cpu_count()} cores"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
