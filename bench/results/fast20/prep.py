import asyncio, collections, tempfile, time
from pathlib import Path
import harness as h
from rlmd.store import db as D
acc = collections.Counter(); cnt = collections.Counter()
_p = D.Store._prepare
def prep(self, event):
    t = time.thread_time_ns(); r = _p(self, event); acc[type(event).__name__ + (":" + str(getattr(event, "role", "")) if hasattr(event, "role") else "")] += time.thread_time_ns() - t; cnt[type(event).__name__ + (":" + str(getattr(event, "role", "")) if hasattr(event, "role") else "")] += 1; return r
D.Store._prepare = prep
async def main():
    script, _ = h.make_script([3] * 10 + [2] * 10, "rlmd")
    db = Path(tempfile.mkdtemp()) / "w.db"
    for i in range(23):
        if i == 3: acc.clear(); cnt.clear()
        await h.rlmd_whole_run(script, h.SMALL_CONTEXT, sandbox="subprocess", store_path=db)
    for k, v in acc.most_common(): print(f"{k:35s} {v/20/1e3:7.0f} us/run {cnt[k]/20:5.0f}/run {v/cnt[k]/1e3:6.1f} us each")
asyncio.run(main())
