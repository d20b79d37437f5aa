"""etcd storage: objects as JSON under ``/registry/...``, resourceVersion = etcd mod_revision.

Every write is a transaction that compares the key's revision, so a stale
writer gets a Conflict instead of overwriting; nothing here caches.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal

import aetcd
import aetcd.exceptions
import grpc
from aetcd import rpc

from daemons.api.errors import Gone, ServiceUnavailable
from daemons.machinery.etcd import WatchCompacted, WatchEnded, describe_error, etcd_client, open_watch

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class StoredEvent:
    """One change to one key, as the watch hands it on."""

    type: EventType
    key: str
    object: dict[str, Any]
    previous: dict[str, Any] | None
    revision: int


def decode(value: bytes, revision: int) -> dict[str, Any]:
    obj = json.loads(value)
    obj.setdefault("metadata", {})["resourceVersion"] = str(revision)
    return obj


def encode(obj: dict[str, Any]) -> bytes:
    """The stored form: resourceVersion is never stored, it is the key's revision."""
    metadata = {key: value for key, value in obj.get("metadata", {}).items() if key != "resourceVersion"}
    return json.dumps({**obj, "metadata": metadata}, separators=(",", ":")).encode()


class ClaimTaken(Exception):
    """A write lost because another object holds one of the claim keys it meant to create."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__(", ".join(keys))
        self.keys = keys


@dataclass(frozen=True)
class Claims:
    """Keys a write takes (created only where absent) and gives back (deleted), in the object's transaction.

    Values allocated to an object (a Service's cluster IP, its node ports) are one key each: two apiservers
    sharing etcd can never hand out the same value, and nothing is taken unless the object is written.
    """

    take: dict[str, bytes] = field(default_factory=dict)
    release: tuple[str, ...] = ()


NO_CLAIMS = Claims()


class Storage:
    """The apiserver's only way to etcd."""

    def __init__(self, endpoints: str, timeout: float = 10.0) -> None:
        self.endpoint = endpoints.split(",")[0].strip()
        self._client = etcd_client(self.endpoint, timeout)

    async def close(self) -> None:
        await self._client.close()

    async def _call(self, method: str, request: Any) -> Any:
        """One KV RPC, with every transport failure turned into 503 for the caller."""
        try:
            await self._client.connect()
            return await getattr(self._client.kvstub, method)(
                request, timeout=self._client._timeout, metadata=self._client.metadata
            )
        except (grpc.aio.AioRpcError, aetcd.exceptions.ClientError, OSError) as error:
            log.warning("etcd %s failed: %s", method, error)
            raise ServiceUnavailable(f"storage is unavailable: {error}") from None

    async def revision(self) -> int:
        response = await self._call("Range", rpc.RangeRequest(key=b"\0", count_only=True, limit=1))
        return response.header.revision

    async def get(self, key: str) -> dict[str, Any] | None:
        response = await self._call("Range", rpc.RangeRequest(key=key.encode()))
        if not response.kvs:
            return None
        kv = response.kvs[0]
        return decode(kv.value, kv.mod_revision)

    async def get_raw(self, key: str) -> bytes | None:
        response = await self._call("Range", rpc.RangeRequest(key=key.encode()))
        return response.kvs[0].value if response.kvs else None

    async def list_keyed(self, prefix: str) -> tuple[list[tuple[str, dict[str, Any]]], int]:
        """Every ``(key, object)`` under ``prefix`` and the store revision they were read at."""
        key = prefix.encode()
        response = await self._call("Range", rpc.RangeRequest(key=key, range_end=_prefix_end(key)))
        return [(kv.key.decode(), decode(kv.value, kv.mod_revision)) for kv in response.kvs], response.header.revision

    async def list(self, prefix: str) -> tuple[list[dict[str, Any]], int]:
        """Every object under ``prefix`` and the store revision they were read at."""
        items, revision = await self.list_keyed(prefix)
        return [obj for _key, obj in items], revision

    async def list_keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix``, without their values."""
        key = prefix.encode()
        response = await self._call("Range", rpc.RangeRequest(key=key, range_end=_prefix_end(key), keys_only=True))
        return [kv.key.decode() for kv in response.kvs]

    async def _txn(self, compare: list[Any], success: list[Any], failure: list[Any] | None = None) -> Any:
        request = rpc.TxnRequest(
            compare=[item.build_message() for item in compare],
            success=self._client._ops_to_requests(success),
            failure=self._client._ops_to_requests(failure or []),
        )
        return await self._call("Txn", request)

    async def _guarded_txn(self, key: str, expected_revision: int, op: Any, claims: Claims) -> int | None:
        """Run ``op`` on ``key`` if it is at ``expected_revision`` (0: absent) and no key of ``claims.take`` exists.

        The revision written; None when ``key`` moved; ``ClaimTaken`` when only claims stood in the way.
        """
        txn = self._client.transactions
        taken = list(claims.take)
        compare = [txn.mod(key.encode()) == expected_revision, *(txn.create(claim.encode()) == 0 for claim in taken)]
        success = [op, *(txn.put(claim.encode(), value) for claim, value in claims.take.items()),
                   *(txn.delete(claim.encode()) for claim in claims.release)]
        failure = [txn.get(key.encode()), *(txn.get(claim.encode()) for claim in taken)] if taken else []
        response = await self._txn(compare, success, failure)
        if response.succeeded:
            return response.header.revision
        if taken:
            current = response.responses[0].response_range.kvs
            held = [claim for claim, result in zip(taken, response.responses[1:], strict=True)
                    if result.response_range.kvs]
            if (current[0].mod_revision if current else 0) == expected_revision and held:
                raise ClaimTaken(held)
        return None

    async def create(self, key: str, obj: dict[str, Any], claims: Claims = NO_CLAIMS) -> int | None:
        """Store a new key (and take ``claims``); the revision written, or None if the key exists."""
        return await self._guarded_txn(key, 0, self._client.transactions.put(key.encode(), encode(obj)), claims)

    async def update(self, key: str, obj: dict[str, Any], expected_revision: int,
                     claims: Claims = NO_CLAIMS) -> int | None:
        """Replace a key only if it is still at ``expected_revision``; None on a lost race."""
        return await self._guarded_txn(key, expected_revision,
                                       self._client.transactions.put(key.encode(), encode(obj)), claims)

    async def delete(self, key: str, expected_revision: int, release: tuple[str, ...] = ()) -> int | None:
        """Delete a key at ``expected_revision`` with the claim keys it held; None on a lost race."""
        return await self._guarded_txn(key, expected_revision, self._client.transactions.delete(key.encode()),
                                       Claims(release=release))

    async def put_raw(self, key: str, value: bytes) -> None:
        await self._call("Put", rpc.PutRequest(key=key.encode(), value=value))

    async def compact(self, revision: int) -> None:
        await self._call("Compact", rpc.CompactionRequest(revision=revision, physical=True))

    async def _require_history(self, prefix: str, revision: int) -> None:
        """``Gone`` unless etcd still holds the history after ``revision`` (a Range at it succeeds)."""
        if revision <= 0:
            return
        key = prefix.encode()
        request = rpc.RangeRequest(key=key, range_end=_prefix_end(key), revision=revision, count_only=True)
        try:
            await self._client.connect()
            await self._client.kvstub.Range(request, timeout=self._client._timeout, metadata=self._client.metadata)
        except grpc.aio.AioRpcError as error:
            if "compacted" in (error.details() or ""):
                raise Gone(f"too old resource version: {revision}") from None
            if "future revision" not in (error.details() or ""):
                raise ServiceUnavailable(f"storage is unavailable: {error.details()}") from None

    async def watch(self, prefix: str, start_revision: int) -> AsyncGenerator[StoredEvent, None]:
        """Every change under ``prefix`` from ``start_revision`` on.

        The etcd watch is created before this returns, so a compacted revision
        raises ``Gone`` here rather than in the middle of a stream.
        """
        await self._require_history(prefix, start_revision - 1)
        key = prefix.encode()
        try:
            events = await open_watch(self._client, key, _prefix_end(key), start_revision, prev_kv=True)
        except WatchCompacted as error:
            raise Gone(f"too old resource version: {start_revision - 1} ({error})") from None
        except (grpc.aio.AioRpcError, aetcd.exceptions.ClientError, OSError, TimeoutError, WatchEnded) as error:
            raise ServiceUnavailable(f"storage is unavailable: {describe_error(error)}") from None
        return _stored_events(events, start_revision)


async def _stored_events(events: AsyncGenerator[rpc.Event, None],
                         start_revision: int) -> AsyncGenerator[StoredEvent, None]:
    try:
        async for event in events:
            yield _stored_event(event)
    except WatchCompacted as error:
        raise Gone(f"too old resource version: {start_revision - 1} ({error})") from None
    except (grpc.aio.AioRpcError, WatchEnded) as error:
        raise ServiceUnavailable(f"storage watch ended: {describe_error(error)}") from None
    finally:
        await events.aclose()


def _stored_event(event: rpc.Event) -> StoredEvent:
    kv = event.kv
    key = kv.key.decode()
    # Without a previous value etcd sends an empty KeyValue rather than none.
    previous = decode(event.prev_kv.value, event.prev_kv.mod_revision) if event.prev_kv.key else None
    if event.type == rpc.Event.DELETE:
        if previous is None:
            obj: dict[str, Any] = {"metadata": {"resourceVersion": str(kv.mod_revision)}}
        else:
            obj = {**previous, "metadata": {**previous["metadata"], "resourceVersion": str(kv.mod_revision)}}
        return StoredEvent("DELETED", key, obj, previous, kv.mod_revision)
    kind: EventType = "ADDED" if kv.create_revision == kv.mod_revision else "MODIFIED"
    return StoredEvent(kind, key, decode(kv.value, kv.mod_revision), previous, kv.mod_revision)


def _prefix_end(key: bytes) -> bytes:
    return aetcd.utils.prefix_range_end(key)
