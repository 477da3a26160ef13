import time, statistics
from rlmd.engine.events import ModelCallStarted
from rlmd.store.codec import to_jsonable
from rlmd.redact import text_redactor, _env_secrets
from rlmd.store import db as D
ev = ModelCallStarted(run_id="r" * 32, depth=0, node_id="n" * 32, parent_id="p" * 32, role="sub", model="sub",
     messages=[{"role": "user", "content": "Question 3.1 about: " + "00000042 alpha charlie value=123\n" * 3}], call_depth=1, sampling=None)
print(ev.data)
print("env secrets", len(_env_secrets()))
def bench(f, n=20000):
    for _ in range(500): f()
    t = time.thread_time_ns()
    for _ in range(n): f()
    return (time.thread_time_ns() - t) / n / 1e3
s = D.Store.__new__(D.Store)
print("event.data    %.2f us" % bench(lambda: ev.data))
d = ev.data
print("text_redactor %.2f us" % bench(lambda: text_redactor()))
r = text_redactor()
print("to_jsonable   %.2f us" % bench(lambda: to_jsonable(d, r)))
print("to_jsonable no redact %.2f us" % bench(lambda: to_jsonable(d)))
print("_prepare      %.2f us" % bench(lambda: D.Store._prepare(s, ev)))
