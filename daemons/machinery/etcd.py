"""etcd clients for the daemons that speak to etcd, and watches, each on a gRPC stream of its own.

aetcd's client multiplexes every watch over one shared stream and pairs each "created" answer with whichever
create request is waiting at that moment. Once a create has timed out (etcd restarting, say), its late answer
is handed to the next caller: that caller then follows another caller's watch (another prefix, another
revision) without any error, and the events it misses are never noticed. Here each watch has its stream,
so an answer can only be its own; streams still share the channel's one connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlparse

import aetcd
import grpc
from aetcd import rpc

# gRPC backs off reconnecting for up to two minutes by default; an etcd restart should cost seconds. Its default
# 4 MiB cap on a received message would fail any LIST of a few thousand objects (etcd's own client lifts it too).
CLIENT_OPTIONS = {"grpc.initial_reconnect_backoff_ms": 100, "grpc.min_reconnect_backoff_ms": 100,
                  "grpc.max_reconnect_backoff_ms": 1000, "grpc.max_receive_message_length": -1}


def etcd_client(endpoint: str, timeout: float) -> aetcd.Client:
    """A client of one endpoint (``http://host:port`` or ``host:port``); it connects on first use."""
    parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
    return aetcd.Client(host=parsed.hostname or "127.0.0.1", port=parsed.port or 2379, timeout=timeout,
                        options=CLIENT_OPTIONS)


def describe_error(error: BaseException) -> str:
    """One line for a failed etcd call: the gRPC status and details, or the error's own words."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__


class WatchCompacted(Exception):
    """The history the watch asked for is compacted away."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"history before revision {compact_revision} is compacted")
        self.compact_revision = compact_revision


class WatchEnded(Exception):
    """etcd cancelled the watch or closed its stream."""


async def open_watch(client: aetcd.Client, key: bytes, range_end: bytes, start_revision: int, *,
                     prev_kv: bool = False) -> AsyncGenerator[rpc.Event, None]:
    """Create the watch, then hand back its events (``mvccpb.Event``) one by one.

    The watch exists when this returns: a refusal (compacted history included) raises here, not later.
    Raises ``grpc.aio.AioRpcError``, ``TimeoutError``, ``WatchCompacted`` or ``WatchEnded``.
    """
    await client.connect()
    call = rpc.WatchStub(client.channel).Watch(metadata=client.metadata)
    try:
        create = rpc.WatchCreateRequest(key=key, range_end=range_end, start_revision=start_revision,
                                        prev_kv=prev_kv)
        await call.write(rpc.WatchRequest(create_request=create))
        answer = await asyncio.wait_for(call.read(), client._timeout)
        _raise_if_ended(answer)
        if not answer.created:
            raise WatchEnded("etcd answered the watch request without creating it")
    except BaseException:
        call.cancel()
        raise
    return _follow(call)


async def _follow(call: grpc.aio.StreamStreamCall) -> AsyncGenerator[rpc.Event, None]:
    try:
        while True:
            response = await call.read()
            _raise_if_ended(response)
            for event in response.events:
                yield event
    finally:
        call.cancel()


def _raise_if_ended(response: Any) -> None:
    """``response`` is a ``WatchResponse``, or ``grpc.aio.EOF`` when the stream closed."""
    if response is grpc.aio.EOF:
        raise WatchEnded("etcd closed the watch stream")
    if response.compact_revision:
        raise WatchCompacted(response.compact_revision)
    if response.canceled:
        raise WatchEnded(f"etcd cancelled the watch: {response.cancel_reason or 'no reason given'}")
