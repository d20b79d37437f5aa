"""The apiserver's storage against a real etcd: large reads, and watches that each get their own prefix's events.

etcd is this module's own, because one test freezes it (SIGSTOP) to make a watch request time out.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path

import pytest

from daemons.api.errors import Gone, ServiceUnavailable
from daemons.apiserver.storage import Storage, StoredEvent
from tests.conftest import EtcdProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[EtcdProcess]:
    server = EtcdProcess(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it has stopped: a thread busy on another core runs on
    for a moment after the signal, long enough to answer a request sent right after it."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = [Path(task, "stat").read_text().rsplit(")", 1)[1].split()[0]
                  for task in Path(f"/proc/{pid}/task").iterdir()]
        if all(state in "Tt" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"etcd ({pid}) did not stop: thread states {states}")


async def put(storage: Storage, key: str) -> None:
    await storage.put_raw(key, json.dumps({"metadata": {"name": key.rsplit("/", 1)[1]}}).encode())


async def next_event(events: AsyncGenerator[StoredEvent, None]) -> StoredEvent:
    return await asyncio.wait_for(anext(events), 10)


async def test_a_watch_after_one_that_timed_out_follows_its_own_prefix(etcd_server: EtcdProcess) -> None:
    storage = Storage(etcd_server.endpoint, timeout=1.0)
    try:
        await put(storage, "/registry/apples/first")
        await put(storage, "/registry/pears/first")
        assert etcd_server.process is not None
        freeze(etcd_server.process.pid)
        try:
            with pytest.raises(ServiceUnavailable):
                await storage.watch("/registry/apples/", 1)
        finally:
            os.kill(etcd_server.process.pid, signal.SIGCONT)
        # etcd answers the request that timed out while this one waits: that answer must not become its.
        pears = await storage.watch("/registry/pears/", 1)

        event = await next_event(pears)

        assert (event.type, event.key) == ("ADDED", "/registry/pears/first")
        await pears.aclose()
    finally:
        await storage.close()


async def test_watches_side_by_side_each_get_their_changes_in_order(etcd_server: EtcdProcess) -> None:
    storage = Storage(etcd_server.endpoint)
    try:
        start = await storage.revision() + 1
        prefixes = [f"/registry/kind{number}/" for number in range(8)]
        watches = await asyncio.gather(*(storage.watch(prefix, start) for prefix in prefixes))
        for round_ in range(3):
            for prefix in prefixes:
                await put(storage, f"{prefix}object{round_}")
        doomed = await storage.get(f"{prefixes[0]}object0")
        assert doomed is not None
        await storage.delete(f"{prefixes[0]}object0", int(doomed["metadata"]["resourceVersion"]))

        for prefix, events in zip(prefixes, watches, strict=True):
            seen = [await next_event(events) for _ in range(3)]
            assert [event.key for event in seen] == [f"{prefix}object{round_}" for round_ in range(3)]
            assert [event.type for event in seen] == ["ADDED"] * 3
        deleted = await next_event(watches[0])
        assert (deleted.type, deleted.key) == ("DELETED", f"{prefixes[0]}object0")
        assert deleted.previous is not None and deleted.previous["metadata"]["name"] == "object0"
        for events in watches:
            await events.aclose()
    finally:
        await storage.close()


async def test_a_watch_from_compacted_history_is_gone(etcd_server: EtcdProcess) -> None:
    storage = Storage(etcd_server.endpoint)
    try:
        await put(storage, "/registry/apples/first")
        await put(storage, "/registry/apples/second")
        await storage.compact(await storage.revision())

        with pytest.raises(Gone):
            await storage.watch("/registry/apples/", 2)
    finally:
        await storage.close()


async def test_a_list_larger_than_grpcs_default_message_cap_is_read(etcd_server: EtcdProcess) -> None:
    storage = Storage(etcd_server.endpoint)
    padding = "x" * 100_000
    try:
        for index in range(50):  # 5 MB in all: gRPC refuses a message over 4 MiB unless told otherwise
            await storage.put_raw(f"/registry/configmaps/big/cm{index:02d}",
                                  json.dumps({"metadata": {"name": f"cm{index:02d}"}, "data": {"x": padding}}).encode())

        objects, _revision = await storage.list("/registry/configmaps/big/")

        assert sorted(obj["metadata"]["name"] for obj in objects) == [f"cm{index:02d}" for index in range(50)]
    finally:
        await storage.close()
