"""The spare pool under many threads at once (``rlm_query_batched`` children, parallel
``completion()`` calls from threads)."""

from __future__ import annotations

import itertools
import threading

from rlmd.sandbox.spares import SparePool

THREADS = 12
TAKES = 300


def test_many_threads_taking_spares_at_once_never_fail_nor_share_a_spare():
    """Found by the hostile review: 9 parallel completions failed at random with
    ``RuntimeError: cannot join thread before it is started`` (one ``take`` joined a refill
    thread another ``take`` had registered but not started yet). Every take must succeed,
    no spare may be handed out twice, and every spare made is taken or discarded."""
    counter = itertools.count()
    lock = threading.Lock()
    made: list[int] = []
    discarded: list[int] = []

    def make(spec: str) -> int:
        with lock:
            made.append(n := next(counter))
        return n

    def discard(item: int) -> None:
        with lock:
            discarded.append(item)

    pool: SparePool[str, int] = SparePool(make, discard, errors=OSError, what="test", join_s=60.0)
    start = threading.Barrier(THREADS)
    taken: list[int] = []
    failures: list[BaseException] = []

    def worker(i: int) -> None:
        start.wait()
        for _ in range(TAKES):
            try:
                spare = pool.take("same spec")
            except BaseException as exc:  # noqa: BLE001 - the test reports them all
                with lock:
                    failures.append(exc)
                continue
            if spare is not None:
                with lock:
                    taken.append(spare)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.close(final=True)
    assert failures == []
    assert len(taken) == len(set(taken))
    assert sorted(taken + discarded) == sorted(made)
    assert taken  # spares were really made and handed out


def test_prepare_makes_one_spare_ahead_that_the_first_take_gets():
    made: list[str] = []
    pool: SparePool[str, str] = SparePool(
        lambda spec: made.append(spec) or f"spare of {spec}",
        lambda item: None,
        errors=OSError,
        what="test",
        join_s=60.0,
    )
    pool.prepare("a")
    pool.prepare("a")  # one is being made or ready already: nothing more
    assert pool.take("a") == "spare of a"  # waits for it; the first start of "a"
    assert made == ["a"]  # and no refill after a single start
    pool.close(final=True)
    pool.prepare("b")  # closed: makes nothing
    assert made == ["a"]


async def test_warm_starts_the_first_kernel_process_ahead_and_start_takes_it(monkeypatch):
    # ``rlmd run`` and a daemon workspace warm the sandbox before loading the codebase, so
    # the kernel's own start-up overlaps the load.
    from helpers.sandbox_host import FakeHost

    from rlmd.sandbox import create_sandbox
    from rlmd.sandbox.process import launch

    made = []

    def spy(spec, workdir=None):
        process = launch.launch(spec, workdir)
        made.append(process)
        return process

    launch.close_spare_kernels()  # a spare left by an earlier test would be taken instead
    monkeypatch.setattr(launch.SPARES, "_make", spy)
    sb = create_sandbox("subprocess")
    sb.warm()
    try:
        await sb.start(FakeHost())
        # A process the pool made ahead (without warm the first start launches its own;
        # a pool that saw two starts of this spec earlier in this process also refills).
        assert sb.workdir in [p.workdir for p in made]
        r = await sb.execute("print(6 * 7)")
        assert r.stdout == "42\n"
    finally:
        await sb.close()


def test_a_refill_left_for_later_starts_at_refill_due_or_the_next_take():
    """``take(refill_later=True)`` hands out the spare without starting the next one (its
    start-up would compete with the taken kernel's first cell); ``refill_due`` starts it,
    and so does another take of the spec before that."""
    made: list[str] = []
    pool: SparePool[str, str] = SparePool(
        lambda spec: made.append(spec) or f"spare {len(made)}",
        lambda item: None,
        errors=OSError,
        what="test",
        join_s=60.0,
    )
    assert pool.take("a") is None  # first start: no spare, none made
    assert pool.take("a") is None  # second start, no spare handed out: made at once
    assert pool.take("a", refill_later=True) == "spare 1"  # waited for; the next is due
    assert made == ["a"] and pool._launching == {} and pool._due == {"a"}
    pool.refill_due()
    assert pool.take("a", refill_later=True) == "spare 2"
    assert made == ["a", "a"] and pool._due == {"a"}
    assert pool.take("a", refill_later=True) is None  # a take while due: made at once
    assert pool.take("a") == "spare 3" and pool._due == set()
    pool.refill_due()  # nothing due: nothing made (the take above started one already)
    pool.close(final=True)
    assert made == ["a", "a", "a", "a"]
    pool.refill_due()  # closed: makes nothing
    assert made == ["a", "a", "a", "a"] and pool._due == set()


def test_settle_waits_for_the_spare_being_made():
    """``settle`` (a benchmark's pause between timed runs) returns once the background
    make is done, and says ``False`` when its time ran out first."""
    release = threading.Event()

    def make(spec: str) -> str:
        release.wait(60)
        return f"spare of {spec}"

    pool: SparePool[str, str] = SparePool(
        make, lambda item: None, errors=OSError, what="test", join_s=60.0
    )
    assert pool.settle(0.0) is True  # nothing being made
    pool.prepare("s")
    assert pool.settle(0.01) is False
    release.set()
    assert pool.settle(60.0) is True
    assert pool.take("s") == "spare of s"
    pool.close(final=True)
