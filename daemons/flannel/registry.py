"""flannel's records in etcd: the network config and the subnet leases, read and written with transactions."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from ipaddress import IPv4Network

import aetcd
import aetcd.exceptions
import grpc
from aetcd import rpc

from daemons.flannel.network import Lease, NetworkConfig, parse_lease, subnet_key, subnets_prefix
from daemons.machinery.etcd import WatchCompacted, WatchEnded, describe_error, etcd_client, open_watch

log = logging.getLogger(__name__)


class EtcdUnavailable(Exception):
    """etcd did not answer; the caller keeps the kernel as it is and tries again later."""


class InvalidConfig(Exception):
    """The stored network config cannot be used; someone has to fix it in etcd."""


@dataclass(frozen=True)
class StoredLease:
    """A lease as etcd holds it: the record, its key's revision and the etcd lease it is attached to."""

    lease: Lease
    mod_revision: int
    lease_id: int


class Registry:
    """One connection to one etcd endpoint; every failure surfaces as EtcdUnavailable."""

    def __init__(self, endpoint: str, prefix: str, timeout: float = 5.0) -> None:
        self.endpoint = endpoint
        self.prefix = prefix.rstrip("/")
        self._client = etcd_client(endpoint, timeout)

    async def close(self) -> None:
        try:
            await self._client.close()
        except (TimeoutError, grpc.aio.AioRpcError, aetcd.exceptions.ClientError, OSError) as error:
            log.debug("closing the etcd client failed: %s", error)

    async def _call(self, method: str, request: object, stub: str = "kvstub") -> object:
        try:
            await self._client.connect()
            return await getattr(getattr(self._client, stub), method)(
                request, timeout=self._client._timeout, metadata=self._client.metadata
            )
        except (TimeoutError, grpc.aio.AioRpcError, aetcd.exceptions.ClientError, OSError) as error:
            raise EtcdUnavailable(f"etcd {self.endpoint} {method}: {describe_error(error)}") from None

    async def _txn(self, compare: list[object], success: list[object]) -> bool:
        request = rpc.TxnRequest(compare=[item.build_message() for item in compare],
                                 success=self._client._ops_to_requests(success), failure=[])
        response = await self._call("Txn", request)
        return response.succeeded

    async def stored_config(self) -> NetworkConfig | None:
        key = f"{self.prefix}/config"
        response = await self._call("Range", rpc.RangeRequest(key=key.encode()))
        if not response.kvs:
            return None
        try:
            return NetworkConfig.from_json(response.kvs[0].value)
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidConfig(f"{key}: {error}") from None

    async def network_config(self, default: NetworkConfig) -> NetworkConfig:
        """The stored config; ``default`` is stored first when there is none (the first writer wins)."""
        key = f"{self.prefix}/config".encode()
        txn = self._client.transactions
        if await self._txn([txn.create(key) == 0], [txn.put(key, default.to_json())]):
            log.info("stored the network config %s: %s", key.decode(), default.to_json().decode())
        stored = await self.stored_config()
        if stored is None:
            raise EtcdUnavailable(f"{key.decode()} vanished right after it was written")
        return stored

    async def leases(self) -> tuple[dict[IPv4Network, StoredLease], int]:
        """Every parseable lease and the revision they were read at."""
        key = subnets_prefix(self.prefix).encode()
        response = await self._call("Range", rpc.RangeRequest(key=key, range_end=aetcd.utils.prefix_range_end(key)))
        found = {}
        for kv in response.kvs:
            lease = parse_lease(kv.key.decode(), kv.value)
            if lease is not None:
                found[lease.subnet] = StoredLease(lease, kv.mod_revision, kv.lease)
        return found, response.header.revision

    async def grant(self, ttl: int) -> int:
        response = await self._call("LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl), stub="leasestub")
        return response.ID

    async def refresh(self, lease_id: int) -> int:
        """Keep ``lease_id`` alive; its remaining TTL, 0 or less when it has expired or was revoked."""
        try:
            await self._client.connect()
            reply = await self._client.refresh_lease(lease_id)
        except (TimeoutError, grpc.aio.AioRpcError, aetcd.exceptions.ClientError, OSError) as error:
            raise EtcdUnavailable(f"etcd {self.endpoint} LeaseKeepAlive: {describe_error(error)}") from None
        return reply.TTL if reply is not None else 0

    async def revoke(self, lease_id: int) -> None:
        try:
            await self._call("LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease_id), stub="leasestub")
        except EtcdUnavailable as error:
            if "not found" not in str(error):
                raise

    async def create(self, lease: Lease, lease_id: int) -> bool:
        """Store ``lease`` only if its subnet is free; False when another node got there first."""
        key = subnet_key(self.prefix, lease.subnet).encode()
        txn = self._client.transactions
        return await self._txn([txn.create(key) == 0], [txn.put(key, lease.to_json(), lease=lease_id)])

    async def replace(self, lease: Lease, lease_id: int, mod_revision: int) -> bool:
        """Rewrite a lease record still at ``mod_revision`` (ours, after a restart); False if it changed since."""
        key = subnet_key(self.prefix, lease.subnet).encode()
        txn = self._client.transactions
        return await self._txn([txn.mod(key) == mod_revision], [txn.put(key, lease.to_json(), lease=lease_id)])

    async def delete(self, subnet: IPv4Network, mod_revision: int | None = None) -> bool:
        """Delete a lease record, only if still at ``mod_revision`` when given; False if it changed since."""
        key = subnet_key(self.prefix, subnet).encode()
        txn = self._client.transactions
        compare = [] if mod_revision is None else [txn.mod(key) == mod_revision]
        return await self._txn(compare, [txn.delete(key)])

    async def changes(self, start_revision: int) -> AsyncIterator[None]:
        """One item per batch of lease changes from ``start_revision`` on; the caller re-reads the leases."""
        key = subnets_prefix(self.prefix).encode()
        try:
            events = await open_watch(self._client, key, aetcd.utils.prefix_range_end(key), start_revision)
        except (TimeoutError, grpc.aio.AioRpcError, aetcd.exceptions.ClientError, OSError, WatchEnded,
                WatchCompacted) as error:
            raise EtcdUnavailable(f"etcd {self.endpoint} Watch: {describe_error(error)}") from None
        try:
            async for _event in events:
                yield None
        except (grpc.aio.AioRpcError, WatchEnded, WatchCompacted) as error:
            raise EtcdUnavailable(f"etcd {self.endpoint} watch ended: {describe_error(error)}") from None
        finally:
            await events.aclose()
