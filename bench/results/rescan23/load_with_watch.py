"""Paired: load_codebase of a folder with and without a FolderWatch filled by the walk
(what the watch adds to a workspace's first load and to a walk after a change)."""
import os, statistics, sys, time
from pathlib import Path
from rlmd.context import load_codebase
from rlmd.workspace.watch import FolderWatch

root, rounds = Path(sys.argv[1]), int(sys.argv[2])
load_codebase(root)  # page cache
plain, watched = [], []
for _ in range(rounds):
    t = time.perf_counter(); load_codebase(root); plain.append(time.perf_counter() - t)
    w = FolderWatch()
    t = time.perf_counter(); load_codebase(root, on_folder=w.add); watched.append(time.perf_counter() - t)
    n = w.folders; w.close()
print(f"{root}: {n} folders watched; median load {statistics.median(plain):.3f} s without a watch, "
      f"{statistics.median(watched):.3f} s with one ({rounds} paired rounds); load {os.getloadavg()}")
