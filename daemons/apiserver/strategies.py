"""What the apiserver does for a kind beyond its row's pure hooks: work that needs storage or the cluster's
configuration. Keyed by the row's qualified name; a kind without an entry gets ``Strategy``'s no-ops.

- ``prepare(obj, current)``: read an update as the kind means it, before admission (a Service keeps the
  cluster IP and node ports its manifest leaves out).
- ``references(storage, resource, obj, current)``: refuse an object naming what does not exist.
- ``claims(storage, network, rng, obj, current)``: fill allocated values in and say which unique keys the write takes
  and gives back (a Service's cluster IP and node ports).
- ``release(current)``: the claim keys a stored object gives back when it goes.
"""

from __future__ import annotations

import random
from typing import Any

from daemons.api.bundle import Resource
from daemons.api.kinds import dns as dns_kind
from daemons.api.kinds import service as service_kind
from daemons.apiserver import dns, services
from daemons.apiserver.services import ServiceNetwork
from daemons.apiserver.storage import NO_CLAIMS, Claims, Storage

Obj = dict[str, Any]


class Strategy:
    """The no-op strategy: nothing to carry over, check against storage, or allocate."""

    def prepare(self, obj: Obj, current: Obj) -> Obj:
        return obj

    async def references(self, storage: Storage, resource: Resource, obj: Obj, current: Obj | None) -> None:
        return None

    async def claims(self, storage: Storage, network: ServiceNetwork, rng: random.Random, obj: Obj,
                     current: Obj | None) -> tuple[Obj, Claims]:
        return obj, NO_CLAIMS

    def release(self, current: Obj) -> tuple[str, ...]:
        return ()


class ServiceStrategy(Strategy):
    """Cluster IPs and node ports are unique across Services: each write claims its own under compare-and-swap."""

    def prepare(self, obj: Obj, current: Obj) -> Obj:
        return services.carry_over(current, obj)

    async def claims(self, storage: Storage, network: ServiceNetwork, rng: random.Random, obj: Obj,
                     current: Obj | None) -> tuple[Obj, Claims]:
        held = None
        if services.asks_for_new_values(obj, current):
            held = services.held_by_others(await storage.list_keys(services.RANGES_PREFIX), current)
        return services.allocate(network, obj, current, held, rng)

    def release(self, current: Obj) -> tuple[str, ...]:
        return tuple(sorted(services.claim_keys(current)))


class DNSStrategy(Strategy):
    """Every path of a DNS object must name a Service of its namespace and a port that Service has."""

    async def references(self, storage: Storage, resource: Resource, obj: Obj, current: Obj | None) -> None:
        await dns.check_routes(storage, resource, obj, current)


NO_STRATEGY = Strategy()
STRATEGIES: dict[str, Strategy] = {
    service_kind.RESOURCE.qualified_name: ServiceStrategy(),
    dns_kind.RESOURCE.qualified_name: DNSStrategy(),
}


def strategy_for(resource: Resource) -> Strategy:
    return STRATEGIES.get(resource.qualified_name, NO_STRATEGY)
