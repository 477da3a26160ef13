"""HTTP clients of the provider SDKs, shared by the models that talk to one server.

Making an ``AsyncOpenAI`` or ``AsyncAnthropic`` costs ~47 ms (httpx loads the CA store, even
for an ``http://`` server; openai 3.60, anthropic 2.16, measured in session 21), which a
one-off run paid once per model: a root and its sub-model on one server made two. The model
name is a per-request field, so one client serves them all. A client is shared per event
loop (its connections belong to one) and per provider, key, server and timeout, and closed
with the last model that uses it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Hashable
from typing import Any

_by_loop: weakref.WeakKeyDictionary[Any, dict[Hashable, list[Any]]] = weakref.WeakKeyDictionary()


def acquire(settings: Hashable, make: Callable[[], Any]) -> Any:
    """The client for ``settings`` on the running loop, made with ``make()`` if there is
    none; counted until :func:`release`.

    Raises:
        RuntimeError: no running event loop.
    """
    clients = _by_loop.setdefault(asyncio.get_running_loop(), {})
    entry = clients.get(settings)
    if entry is None:
        entry = clients[settings] = [make(), 0]
    entry[1] += 1
    return entry[0]


async def release(client: Any) -> None:
    """One user of ``client`` fewer; the last one closes it (``await client.close()``)."""
    for clients in list(_by_loop.values()):
        for settings, entry in list(clients.items()):
            if entry[0] is client:
                entry[1] -= 1
                if entry[1] > 0:
                    return
                del clients[settings]
                break
    await client.close()
