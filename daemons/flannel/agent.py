"""The agent: hold this node's subnet lease and keep the kernel routing every other node's subnet.

Level-triggered: a watch on the leases only wakes the loop; every pass reads
all leases, computes the wanted routes, neighbours and FDB entries, and
applies the difference from what the kernel holds. A timer forces a pass
every ``resync_seconds``, which also repairs entries someone deleted by hand.
When etcd is unreachable the kernel is left as it is and the agent reconnects
with back-off, so pods keep talking through an etcd restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from pyroute2 import AsyncIPRoute

from daemons.api.files import write_if_changed
from daemons.flannel import firewall, kernel
from daemons.flannel.firewall import FirewallError
from daemons.flannel.kernel import KernelError, Underlay, VxlanDevice
from daemons.flannel.network import (
    Lease,
    NetworkConfig,
    desired_peers,
    diff,
    pick_lease,
    previous_subnet,
    render_subnet_file,
    stale_leases,
    vtep_mac,
)
from daemons.flannel.registry import EtcdUnavailable, InvalidConfig, Registry, StoredLease
from daemons.flannel.settings import FlannelSettings

log = logging.getLogger(__name__)

MAX_BACKOFF = 30.0
ACQUIRE_ATTEMPTS = 10


class AcquireError(Exception):
    """No subnet could be leased: the network is full, or other nodes won every race."""


@dataclass(frozen=True)
class Node:
    """This node as the overlay sees it."""

    config: NetworkConfig
    underlay: Underlay
    public_ip: IPv4Address

    @property
    def device(self) -> VxlanDevice:
        return VxlanDevice(f"flannel.{self.config.vni}", self.config.vni, self.underlay.address, self.underlay.index,
                           self.config.port)

    def lease(self, subnet: IPv4Network) -> Lease:
        return Lease(subnet, self.public_ip, vtep_mac(self.public_ip, self.config.vni), self.config.vni)


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


class Agent:
    def __init__(self, settings: FlannelSettings) -> None:
        self.settings = settings
        self.subnet: IPv4Network | None = previous_subnet(read_text(settings.subnet_file))
        self.lease_id: int | None = None
        self._refreshed = 0.0
        self._served = False
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    @property
    def refresh_interval(self) -> float:
        """Renew a quarter of the way through the TTL (at most hourly), far ahead of expiry."""
        return min(self.settings.subnet_lease_ttl_seconds / 4, 3600.0)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Serve until stop(): one etcd session after another, endpoint after endpoint, with back-off between."""
        endpoints = self.settings.etcd_endpoints
        attempt, delay = 0, 1.0
        while not self._stopping.is_set():
            registry = Registry(endpoints[attempt % len(endpoints)], self.settings.etcd_prefix)
            self._served = False
            try:
                await self._serve(registry)
            except (EtcdUnavailable, InvalidConfig, KernelError, FirewallError, AcquireError, OSError) as error:
                delay = 1.0 if self._served else delay
                log.warning("%s; kernel state kept, retrying in %.0fs", error, delay)
                await self._sleep(delay)
                attempt, delay = attempt + 1, min(delay * 2, MAX_BACKOFF)
            finally:
                await registry.close()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _serve(self, registry: Registry) -> None:
        config = await registry.network_config(self.settings.network_config())
        if config != self.settings.network_config():
            log.info("etcd holds the network config %s, which wins over the flags", config.to_json().decode())
        async with AsyncIPRoute() as ipr:
            underlay = await kernel.find_underlay(ipr, self.settings.public_ip, self.settings.iface)
            node = Node(config, underlay, self.settings.public_ip or underlay.address)
            leases, revision = await registry.leases()
            log.info("node %s on %s (mtu %d), connected to etcd %s", node.public_ip, underlay.name, underlay.mtu,
                     registry.endpoint)
            watcher = asyncio.create_task(self._watch(registry, revision + 1))
            try:
                while not self._stopping.is_set():
                    self._wake.clear()
                    await self._reconcile(registry, ipr, node, leases)
                    await self._wait(watcher)
                    leases, _ = await registry.leases()
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, EtcdUnavailable):
                    await watcher

    async def _watch(self, registry: Registry, start_revision: int) -> None:
        async for _change in registry.changes(start_revision):
            self._wake.set()

    async def _wait(self, watcher: asyncio.Task[None]) -> None:
        """Until a lease changes, stop(), the next resync or the next lease renewal; a dead watch raises."""
        due = self._refreshed + self.refresh_interval - time.monotonic()
        waiter = asyncio.create_task(self._wake.wait())
        try:
            await asyncio.wait({watcher, waiter}, timeout=max(0.0, min(self.settings.resync_seconds, due)),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if watcher.done():
            watcher.result()  # raises what ended the watch
            raise EtcdUnavailable("the etcd watch ended")

    async def _reconcile(
        self, registry: Registry, ipr: AsyncIPRoute, node: Node, leases: dict[IPv4Network, StoredLease]
    ) -> None:
        await self._hold_lease(registry, node, leases)
        assert self.subnet is not None
        for stale in stale_leases((stored.lease for stored in leases.values()), self.subnet, node.public_ip):
            if await registry.delete(stale.subnet, leases[stale.subnet].mod_revision):
                log.info("deleted %s, an older lease of this node", stale.subnet)
        index = await kernel.ensure_device(ipr, node.device, vtep_mac(node.public_ip, node.config.vni),
                                           node.underlay.overlay_mtu, self.subnet.network_address)
        wanted = desired_peers(node.config, (stored.lease for stored in leases.values()), self.subnet, node.public_ip)
        present = await kernel.read_peers(ipr, index)
        failures = await kernel.apply_peers(ipr, index, diff(wanted.routes, present.routes),
                                            diff(wanted.neighbours, present.neighbours), diff(wanted.fdb, present.fdb))
        for failure in failures:
            log.warning("%s", failure)
        for change in firewall.ensure_rules(node.config.network, self.settings.ip_masq):
            log.info("iptables: %s", change)
        # Last, so that the file's existence means the node is ready for Docker to start on the subnet.
        if write_if_changed(self.settings.subnet_file, render_subnet_file(
                node.config, self.subnet, node.underlay.overlay_mtu, self.settings.ip_masq)):
            log.info("wrote %s for subnet %s", self.settings.subnet_file, self.subnet)
        self._served = True

    async def _hold_lease(self, registry: Registry, node: Node, leases: dict[IPv4Network, StoredLease]) -> None:
        """Make sure etcd holds this node's lease as it should be, renewed in time; take one if it holds none."""
        stored = leases.get(self.subnet) if self.subnet is not None else None
        if stored is not None and stored.lease == node.lease(stored.lease.subnet) and stored.lease_id == self.lease_id:
            if time.monotonic() - self._refreshed < self.refresh_interval:
                return
            if await registry.refresh(stored.lease_id) > 0:
                self._refreshed = time.monotonic()
                log.debug("renewed the lease of %s", self.subnet)
                return
            log.warning("the etcd lease of %s expired", self.subnet)
        await self._acquire(registry, node, leases)

    async def _acquire(self, registry: Registry, node: Node, leases: dict[IPv4Network, StoredLease]) -> None:
        ttl = self.settings.subnet_lease_ttl_seconds
        for _attempt in range(ACQUIRE_ATTEMPTS):
            subnet, held = pick_lease(node.config, (stored.lease for stored in leases.values()), node.public_ip,
                                      self.subnet)
            if subnet is None:
                raise AcquireError(f"no free /{node.config.subnet_len} left in {node.config.network}")
            record = node.lease(subnet)
            if held:
                stored = leases[subnet]
                alive = stored.lease_id != 0 and await registry.refresh(stored.lease_id) > 0
                lease_id = stored.lease_id if alive else await registry.grant(ttl)
                unchanged = stored.lease == record and alive
                won = unchanged or await registry.replace(record, lease_id, stored.mod_revision)
            else:
                lease_id = await registry.grant(ttl)
                won = await registry.create(record, lease_id)
                if not won:
                    await registry.revoke(lease_id)
            if won:
                if self.subnet is not None and subnet != self.subnet:
                    log.warning("subnet changed from %s to %s: Docker's bip must follow (restart dockerd)",
                                self.subnet, subnet)
                log.info("%s subnet %s (public ip %s, vtep mac %s, etcd lease %x)",
                         "reclaimed" if held else "leased", subnet, node.public_ip, record.vtep_mac, lease_id)
                self.subnet, self.lease_id, self._refreshed = subnet, lease_id, time.monotonic()
                return
            leases, _ = await registry.leases()
        raise AcquireError(f"lost {ACQUIRE_ATTEMPTS} races for a subnet")


async def release(settings: FlannelSettings) -> bool:
    """``--release``: delete this node's lease, its vxlan device (routes go with it), our chains and the subnet file.

    Every step is tried even when an earlier one failed; False if any did.
    """
    ok = True
    subnet = previous_subnet(read_text(settings.subnet_file))
    vni = settings.vni
    async with AsyncIPRoute() as ipr:
        public_ip = settings.public_ip
        if public_ip is None:
            try:
                public_ip = (await kernel.find_underlay(ipr, None, settings.iface)).address
            except KernelError as error:
                log.warning("%s: releasing only the subnet file's lease", error)
        for endpoint in settings.etcd_endpoints:
            registry = Registry(endpoint, settings.etcd_prefix)
            try:
                config = await registry.stored_config()
                vni = config.vni if config is not None else vni
                leases, _ = await registry.leases()
                for stored in leases.values():
                    lease = stored.lease
                    if lease.public_ip == public_ip or (lease.subnet == subnet and public_ip is None):
                        await registry.delete(lease.subnet)
                        if stored.lease_id:
                            await registry.revoke(stored.lease_id)
                        log.info("released subnet %s (public ip %s)", lease.subnet, lease.public_ip)
                break
            except (EtcdUnavailable, InvalidConfig) as error:
                log.error("%s", error)
            finally:
                await registry.close()
        else:
            ok = False
        try:
            if await kernel.delete_device(ipr, f"flannel.{vni}"):
                log.info("deleted flannel.%d with its routes, neighbours and fdb entries", vni)
        except KernelError as error:
            log.error("%s", error)
            ok = False
    try:
        for change in firewall.remove_rules():
            log.info("iptables: %s", change)
    except FirewallError as error:
        log.error("iptables: %s", error)
        ok = False
    with contextlib.suppress(FileNotFoundError):
        settings.subnet_file.unlink()
        log.info("removed %s", settings.subnet_file)
    return ok
