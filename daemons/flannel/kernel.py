"""The data path in the kernel, through netlink (pyroute2): the VXLAN device and its routes, neighbours and FDB.

Reads what the kernel holds in the same shapes network.desired_peers returns,
so the agent converges by applying a diff of two PeerStates.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.ndmsg import NUD_PERMANENT
from pyroute2.netlink.rtnl.rtmsg import RTNH_F_ONLINK

from daemons.flannel.network import VXLAN_OVERHEAD, Changes, FdbEntry, Neighbour, PeerState, Route

log = logging.getLogger(__name__)

MAIN_TABLE = 254


class KernelError(Exception):
    """The kernel refused a change or lacks what flanneld needs (no default route, no such interface)."""


@dataclass(frozen=True)
class Underlay:
    """The interface VXLAN packets leave by, and the address they come from."""

    name: str
    index: int
    address: IPv4Address
    mtu: int

    @property
    def overlay_mtu(self) -> int:
        return self.mtu - VXLAN_OVERHEAD


@dataclass(frozen=True)
class VxlanDevice:
    """What makes a vxlan device ours as it is; anything else differing means it must be recreated."""

    name: str
    vni: int
    local: IPv4Address
    link: int
    port: int


async def _all(result: Any) -> list[Any]:
    """pyroute2 answers a dump with an async iterator and a single request with a list."""
    if hasattr(result, "__aiter__"):
        return [message async for message in result]
    return list(result)


async def find_underlay(ipr: AsyncIPRoute, public_ip: IPv4Address | None, iface: str | None) -> Underlay:
    """The underlay: ``iface``, else the interface holding ``public_ip``, else the default route's interface."""
    try:
        return await _find_underlay(ipr, public_ip, iface)
    except NetlinkError as error:  # an interface that went away between two requests
        raise KernelError(f"looking for the underlay: {error}") from None


async def _find_underlay(ipr: AsyncIPRoute, public_ip: IPv4Address | None, iface: str | None) -> Underlay:
    addresses = await _all(await ipr.addr("dump", family=socket.AF_INET))
    index: int | None = None
    if iface:
        found = await ipr.link_lookup(ifname=iface)
        if not found:
            raise KernelError(f"interface {iface} does not exist")
        index = found[0]
    elif public_ip is not None:
        index = next((a["index"] for a in addresses if a.get("IFA_ADDRESS") == str(public_ip)), None)
    if index is None:
        routes = await _all(await ipr.route("dump", family=socket.AF_INET, table=MAIN_TABLE))
        index = next((r.get("RTA_OIF") for r in routes if r["dst_len"] == 0 and r.get("RTA_OIF")), None)
        if index is None:
            raise KernelError("no default route: give --public-ip or --iface")
    mine = [IPv4Address(a.get("IFA_ADDRESS")) for a in addresses if a["index"] == index]
    if not mine:
        raise KernelError(f"interface #{index} has no IPv4 address")
    address = public_ip if public_ip in mine else mine[0]
    link = (await ipr.link("get", index=index))[0]
    return Underlay(link.get("IFLA_IFNAME"), index, address, link.get("IFLA_MTU"))


async def device_index(ipr: AsyncIPRoute, name: str) -> int | None:
    found = await ipr.link_lookup(ifname=name)
    return found[0] if found else None


def _as_device(link: Any) -> VxlanDevice | None:
    info = link.get("IFLA_LINKINFO")
    if info is None or info.get("IFLA_INFO_KIND") != "vxlan":
        return None
    data = info.get("IFLA_INFO_DATA")
    local = data.get("IFLA_VXLAN_LOCAL")
    return VxlanDevice(link.get("IFLA_IFNAME"), data.get("IFLA_VXLAN_ID"), IPv4Address(local or "0.0.0.0"),
                       data.get("IFLA_VXLAN_LINK") or 0, data.get("IFLA_VXLAN_PORT"))


async def ensure_device(ipr: AsyncIPRoute, device: VxlanDevice, mac: str, mtu: int, address: IPv4Address) -> int:
    """Create or repair the vxlan device: its parameters, MAC, MTU, its one /32 address, up. Its index."""
    try:
        index = await device_index(ipr, device.name)
        if index is not None:
            found = _as_device((await ipr.link("get", index=index))[0])
            if found != device:
                log.info("recreating %s: it is %s, should be %s", device.name, found, device)
                await ipr.link("del", index=index)
                index = None
        if index is None:
            await ipr.link("add", ifname=device.name, kind="vxlan", vxlan_id=device.vni, vxlan_local=str(device.local),
                           vxlan_link=device.link, vxlan_port=device.port, vxlan_learning=0, address=mac, mtu=mtu)
            index = await device_index(ipr, device.name)
            log.info("created %s (vni %d, local %s, port %d, mac %s, mtu %d)", device.name, device.vni,
                     device.local, device.port, mac, mtu)
        link = (await ipr.link("get", index=index))[0]
        if link.get("IFLA_ADDRESS") != mac or link.get("IFLA_MTU") != mtu:
            await ipr.link("set", index=index, address=mac, mtu=mtu)
            log.info("set %s to mac %s, mtu %d", device.name, mac, mtu)
        present = {(a.get("IFA_ADDRESS"), a["prefixlen"])
                   for a in await _all(await ipr.addr("dump", index=index, family=socket.AF_INET))}
        for stale, prefixlen in present - {(str(address), 32)}:
            await ipr.addr("del", index=index, address=stale, prefixlen=prefixlen)
            log.info("removed %s/%d from %s", stale, prefixlen, device.name)
        if (str(address), 32) not in present:
            await ipr.addr("add", index=index, address=str(address), prefixlen=32)
            log.info("added %s/32 to %s", address, device.name)
        if not link["flags"] & 1:  # IFF_UP
            await ipr.link("set", index=index, state="up")
        return index
    except NetlinkError as error:
        raise KernelError(f"{device.name}: {error}") from None


async def delete_device(ipr: AsyncIPRoute, name: str) -> bool:
    """Remove the device (the kernel drops its routes, neighbours and FDB with it); False if it was not there."""
    try:
        index = await device_index(ipr, name)
        if index is None:
            return False
        await ipr.link("del", index=index)
        return True
    except NetlinkError as error:
        raise KernelError(f"{name}: {error}") from None


async def read_peers(ipr: AsyncIPRoute, index: int) -> PeerState:
    """The routes, permanent neighbours and FDB entries the device carries now."""
    try:
        return await _read_peers(ipr, index)
    except NetlinkError as error:  # the device was deleted or recreated meanwhile
        raise KernelError(f"reading the device's peers: {error}") from None


async def _read_peers(ipr: AsyncIPRoute, index: int) -> PeerState:
    routes = {
        Route(IPv4Network(f"{r.get('RTA_DST')}/{r['dst_len']}"), IPv4Address(r.get("RTA_GATEWAY")))
        for r in await _all(await ipr.route("dump", family=socket.AF_INET, table=MAIN_TABLE, oif=index))
        if r.get("RTA_OIF") == index and r.get("RTA_GATEWAY") and r.get("RTA_DST")
    }
    neighbours = {
        Neighbour(IPv4Address(n.get("NDA_DST")), n.get("NDA_LLADDR"))
        for n in await _all(await ipr.neigh("dump", ifindex=index, family=socket.AF_INET))
        if n["ifindex"] == index and n["state"] & NUD_PERMANENT and n.get("NDA_LLADDR")
    }
    fdb = {
        FdbEntry(n.get("NDA_LLADDR"), IPv4Address(n.get("NDA_DST")))
        for n in await _all(await ipr.fdb("dump", ifindex=index))
        if n["ifindex"] == index and n.get("NDA_DST") and n.get("NDA_LLADDR")
    }
    return PeerState(frozenset(routes), frozenset(neighbours), frozenset(fdb))


async def apply_peers(
    ipr: AsyncIPRoute, index: int, routes: Changes[Route], neighbours: Changes[Neighbour], fdb: Changes[FdbEntry]
) -> list[str]:
    """Remove what is stale, then add what is missing (FDB before neighbour before route); the failures."""
    failures = []

    async def attempt(what: str, call: Any, *args: Any, **kwargs: Any) -> None:
        try:
            await call(*args, **kwargs)
            log.info("%s", what)
        except NetlinkError as error:
            failures.append(f"{what}: {error}")

    for route in routes.remove:
        await attempt(f"removed route {route.dst} via {route.gateway}", ipr.route, "del", dst=str(route.dst),
                      gateway=str(route.gateway), oif=index, table=MAIN_TABLE)
    for neighbour in neighbours.remove:
        await attempt(f"removed neighbour {neighbour.ip} lladdr {neighbour.mac}", ipr.neigh, "del",
                      dst=str(neighbour.ip), lladdr=neighbour.mac, ifindex=index)
    for entry in fdb.remove:
        await attempt(f"removed fdb {entry.mac} dst {entry.dst}", ipr.fdb, "del", ifindex=index,
                      lladdr=entry.mac, dst=str(entry.dst))
    for entry in fdb.add:
        await attempt(f"added fdb {entry.mac} dst {entry.dst}", ipr.fdb, "append", ifindex=index,
                      lladdr=entry.mac, dst=str(entry.dst), state=NUD_PERMANENT)
    for neighbour in neighbours.add:
        await attempt(f"added neighbour {neighbour.ip} lladdr {neighbour.mac}", ipr.neigh, "replace",
                      dst=str(neighbour.ip), lladdr=neighbour.mac, ifindex=index, state=NUD_PERMANENT)
    for route in routes.add:
        await attempt(f"added route {route.dst} via {route.gateway} onlink", ipr.route, "replace",
                      dst=str(route.dst), gateway=str(route.gateway), oif=index, flags=RTNH_F_ONLINK,
                      table=MAIN_TABLE)
    return failures
