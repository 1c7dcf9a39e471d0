"""Blocking client calls from asyncio: each call on its own thread (never the loop's shared executor, whose few
workers would queue a quick call behind long ones), and a cancelled await closes the call's connection, which
makes the server kill a running exec's process tree."""

from __future__ import annotations

import asyncio
import threading
from typing import Callable, TypeVar

from .client import Cancel

T = TypeVar("T")


def _settle(future: "asyncio.Future[T]", value: T | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)  # type: ignore[arg-type]


async def call(fn: Callable[[Cancel], T]) -> T:
    """Run ``fn(cancel)`` on a thread of its own; on cancellation, ``cancel.cancel()`` ends its connection."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    cancel = Cancel()

    def run() -> None:
        try:
            value = fn(cancel)
        except BaseException as err:  # noqa: BLE001 - handed to the awaiting task
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, future, None, err)
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(_settle, future, value, None)

    threading.Thread(target=run, name="roboguide-call", daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        cancel.cancel()
        raise
