import asyncio, os, sys, tempfile, struct, sqlite3, collections, shutil
from pathlib import Path
import harness as h
import rlmd.store.db as dbm
oc = dbm.Store.close
snap = []
def close(self):
    self.flush()
    if len(snap) == int(sys.argv[1]) - 1:
        shutil.copy(self.path + "-wal", "/tmp/f15/wal.copy")
    snap.append(1); oc(self)
dbm.Store.close = close
async def main(n):
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    for i in range(n):
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="inprocess", store_path=db)
    c = sqlite3.connect(db)
    try:
        owner = {p: name for name, p in c.execute("SELECT name, pageno FROM dbstat")}
    except sqlite3.Error as e:
        print("no dbstat", e); owner = {}
    data = open("/tmp/f15/wal.copy", "rb").read()
    pos = 32; per = collections.Counter(); commits = 0; cur = set(); sets = []
    while pos + 24 + 4096 <= len(data):
        pg, commit = struct.unpack(">II", data[pos:pos+8]); pos += 24 + 4096
        cur.add(pg)
        if commit:
            commits += 1
            for p in cur: per[owner.get(p, f"?{p}")] += 1
            sets.append(len(cur)); cur = set()
    print("commits", commits, "frames/commit", sum(sets)/commits)
    for k, v in per.most_common(): print(f"{v/commits:5.2f}/commit {k}")
asyncio.run(main(int(sys.argv[1])))
