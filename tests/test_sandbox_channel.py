"""The host's side of the kernel channel: a big frame is decoded off the event loop, and
the stream keeps its order and its end behind it (issue 16 item 2: the daemon never blocks).
Real subprocess kernels are exercised through this code by every sandbox test; these tests
feed the channel directly, so what they assert does not depend on timing."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from rlmd.kernel import protocol
from rlmd.sandbox import channel as channel_mod
from rlmd.sandbox.channel import BIG_FRAME, KernelChannel, KernelDied


class Recorder(KernelChannel):
    """A channel whose frames to the kernel are kept, not sent."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        async def no_calls(msg: dict[str, Any]) -> Any:
            raise AssertionError(f"no host call expected: {msg}")

        super().__init__(loop, no_calls, cap=1 << 20)  # type: ignore[arg-type]
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


def done(rid: int, result: Any) -> bytes:
    return protocol.encode({"op": "done", "id": rid, "ok": True, "result": result})


async def test_a_big_frame_is_decoded_off_the_loop_and_the_next_frame_waits_behind_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ch = Recorder(asyncio.get_running_loop())
    decoded_on: list[str] = []
    real = protocol.decode

    def spy(body: bytes) -> dict[str, Any]:
        decoded_on.append(threading.current_thread().name)
        return real(body)

    monkeypatch.setattr(channel_mod.protocol, "decode", spy)
    _, big = ch.request({"op": "get_var", "name": "big"})
    _, small = ch.request({"op": "get_var", "name": "small"})
    value = "x" * BIG_FRAME
    ch._on_frames(done(1, value) + done(2, 7))
    # nothing decoded on the loop yet: the big frame went to a worker thread and the small
    # one behind it was not dispatched out of order
    assert not big.done() and not small.done()
    assert (await small)["result"] == 7
    assert big.done() and big.result()["result"] == value
    main = threading.current_thread().name
    assert len(decoded_on) == 2 and decoded_on[0] != main and decoded_on[1] == main


async def test_the_stream_ending_during_a_big_decode_still_delivers_what_came_before() -> None:
    """A kernel that sent a whole result and then died: the result reaches its request, and
    only then is the channel dropped (other requests fail with KernelDied)."""
    ch = Recorder(asyncio.get_running_loop())
    _, big = ch.request({"op": "get_var", "name": "big"})
    _, never = ch.request({"op": "get_var", "name": "other"})
    ch._on_frames(done(1, "y" * BIG_FRAME))
    ch._stream_ended()
    assert not ch.dead
    assert len((await big)["result"]) == BIG_FRAME
    assert ch.dead
    with pytest.raises(KernelDied):
        await never


async def test_a_big_frame_that_is_not_json_drops_the_channel_with_the_reason() -> None:
    ch = Recorder(asyncio.get_running_loop())
    _, fut = ch.request({"op": "get_var", "name": "big"})
    body = b"{" + b"x" * BIG_FRAME
    ch._on_frames(len(body).to_bytes(4, "big") + body + done(1, "late"))
    with pytest.raises(KernelDied):
        await fut
    assert ch.dead and ch.protocol_error == "the kernel sent a message that is not valid JSON"


async def test_a_channel_dropped_during_a_big_decode_dispatches_nothing_more() -> None:
    ch = Recorder(asyncio.get_running_loop())
    _, fut = ch.request({"op": "get_var", "name": "big"})
    ch._on_frames(done(1, "z" * BIG_FRAME))
    decoding = ch._decoding
    assert decoding is not None
    ch._mark_dead()  # an abort or a kill: nothing the kernel sent is waited for
    with pytest.raises(KernelDied):
        await fut
    await decoding  # the worker finishes; its frame is dropped, not dispatched
    await asyncio.sleep(0)
    assert ch.pending == {} and ch._decoding is None
