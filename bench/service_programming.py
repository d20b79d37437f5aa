"""Service programming benchmark: how fast Services become iptables rules, and how fast a ready pod answers.

Part 1, ``sync`` (the default): the proxy's own work. Renders and applies a full ruleset for
``--services`` Services of ``--endpoints`` ready endpoints each (one in ten a NodePort) with the proxy's
code, in a private network namespace (the bench re-runs itself under ``unshare --net``; the host's tables
are never touched), and prints p50/p99 over ``--runs`` runs of:

- cold start: a new proxy process writing into empty tables (nothing encoded yet);
- restart: a new proxy process over the rules its predecessor left;
- resync: the periodic full sync, nothing changed;
- one endpoint changed: what a pod turning (un)ready costs;

each split into render (Services and Endpoints -> ruleset) and apply (python-iptables: building the
table, then the commits). ``--baseline`` also times one apply the plain python-iptables way (a Rule with
Match and Target objects per rule, ``Chain.append_rule``), for comparison.

    .venv/bin/python bench/service_programming.py [--services 1000] [--endpoints 3] [--runs 10] [--baseline]

Part 2, ``ready``: the whole path on a running cluster (kubeconfig as kubectl finds it): a pod whose
readiness we switch, behind a Service; each round takes it out of rotation, waits until the ClusterIP
refuses, puts it back, and times from the moment the API shows the pod Ready to the moment its answer
comes back through the ClusterIP from this machine (a node of the cluster).

    .venv/bin/python bench/service_programming.py ready [--changes 50] [--image busybox]

The figures are printed; nothing passes or fails on them.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.stats import percentile  # noqa: E402
from daemons.proxy.rules import NodeFacts, Ruleset, render_port, render_ports  # noqa: E402
from daemons.proxy.services import service_ports  # noqa: E402

TARGET_SYNC_SECONDS = 1.0
INSIDE_FLAG = "--inside-private-netns"




def row(name: str, samples: list[float]) -> str:
    return (f"{name:<34}{len(samples):>4}{statistics.median(samples) * 1000:>10.0f}"
            f"{percentile(samples, 99) * 1000:>10.0f}")


# --- part 1: render and apply ---------------------------------------------------------------------


def cluster(services: int, endpoints: int) -> tuple[list[dict], list[dict]]:
    """``services`` Services with one port each, ``endpoints`` ready addresses each; every tenth a NodePort."""
    service_objects, endpoint_objects = [], []
    for index in range(services):
        name = f"svc-{index}"
        node_port = index % 10 == 0
        port = {"name": "http", "port": 80, "targetPort": 8080, **({"nodePort": 30000 + index} if node_port else {})}
        service_objects.append({"metadata": {"namespace": "bench", "name": name}, "spec": {
            "type": "NodePort" if node_port else "ClusterIP", "clusterIP": f"10.96.{index // 250}.{index % 250 + 1}",
            "ports": [port]}})
        addresses = [index * endpoints + offset for offset in range(endpoints)]
        endpoint_objects.append({"metadata": {"namespace": "bench", "name": name}, "subsets": [{
            "addresses": [{"ip": f"10.244.{number // 250}.{number % 250 + 2}"} for number in addresses],
            "ports": [{"name": "http", "port": 8080}]}]})
    return service_objects, endpoint_objects


class Timed:
    """One sync's figures."""

    def __init__(self) -> None:
        self.render: list[float] = []
        self.build: list[float] = []
        self.commit: list[float] = []
        self.total: list[float] = []


def timed_sync(applier, services: list[dict], endpoints: list[dict], into: Timed, facts: NodeFacts) -> None:
    started = time.perf_counter()
    ruleset = render_ports(service_ports(services, endpoints), facts)
    rendered = time.perf_counter()
    stats = applier.apply(ruleset)
    done = time.perf_counter()
    into.render.append(rendered - started)
    into.build.append(stats.encode_seconds)
    into.commit.append(stats.commit_seconds)
    into.total.append(done - started)


def baseline_apply(ruleset: Ruleset) -> float:
    """Seconds to write the ruleset's chains the textbook python-iptables way, one ``append_rule`` per rule."""
    import iptc

    started = time.perf_counter()
    for table_name, chains in ruleset.tables.items():
        table = iptc.Table(table_name, autocommit=False)
        table.refresh()
        for chain_name in chains:  # all of them first: a rule can only jump to a chain that exists
            if not table.is_chain(chain_name):
                table.create_chain(chain_name)
        for chain_name, rules in chains.items():
            chain = iptc.Chain(table, chain_name)
            for rule in rules:
                entry = iptc.Rule()
                if rule.source:
                    entry.src = rule.source
                if rule.destination:
                    entry.dst = rule.destination
                if rule.protocol:
                    entry.protocol = rule.protocol
                for match in rule.matches:
                    built = entry.create_match(match.module)
                    for option, value in match.options:
                        setattr(built, option.replace("-", "_"), value)
                target = entry.create_target(rule.target)
                for option, value in rule.target_options:
                    setattr(target, option.replace("-", "_"), value)
                chain.append_rule(entry)
        table.commit()
    return time.perf_counter() - started


def measure_sync(args: argparse.Namespace) -> None:
    from daemons.proxy.iptables import IptablesApplier

    facts = NodeFacts()
    services, endpoints = cluster(args.services, args.endpoints)
    cold, restart, resync, change = Timed(), Timed(), Timed(), Timed()
    for run in range(args.runs):
        IptablesApplier().cleanup()
        render_port.cache_clear()
        timed_sync(IptablesApplier(), services, endpoints, cold, facts)
        render_port.cache_clear()
        applier = IptablesApplier()
        timed_sync(applier, services, endpoints, restart, facts)
        timed_sync(applier, services, endpoints, resync, facts)
        changed = [dict(item) for item in endpoints]
        subset = dict(changed[run]["subsets"][0])
        subset["addresses"] = [*subset["addresses"][:-1], {"ip": f"10.250.{run // 250}.{run % 250 + 1}"}]
        changed[run] = {**changed[run], "subsets": [subset]}
        timed_sync(applier, services, changed, change, facts)
    ruleset = render_ports(service_ports(services, endpoints), facts)
    rules = sum(len(chain) for chains in ruleset.tables.values() for chain in chains.values())
    chains = sum(len(chains) for chains in ruleset.tables.values())
    load = os.getloadavg()
    print(f"service programming, part 1: {args.services} Services x {args.endpoints} endpoints = {rules} rules in "
          f"{chains} chains; python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print(f"{'':<34}{'n':>4}{'p50 ms':>10}{'p99 ms':>10}")
    for name, timed in (("cold start", cold), ("restart (rules in place)", restart),
                        ("resync (nothing changed)", resync), ("one endpoint changed", change)):
        print(row(f"{name}: total", timed.total))
        print(row("  render", timed.render))
        print(row("  apply: build the tables", timed.build))
        print(row("  apply: commit nat + filter", timed.commit))
    verdicts = [f"{name} p99 {percentile(timed.total, 99):.2f} s "
                f"{'meets' if percentile(timed.total, 99) <= TARGET_SYNC_SECONDS else 'MISSES'}"
                for name, timed in (("cold start", cold), ("resync", resync))]
    print(f"\ntarget: a full sync <= {TARGET_SYNC_SECONDS:.0f} s; " + "; ".join(verdicts))
    if args.baseline:
        IptablesApplier().cleanup()
        seconds = baseline_apply(ruleset)
        print(f"plain python-iptables (Rule/Match/Target objects, Chain.append_rule), one apply into empty tables: "
              f"{seconds:.2f} s ({seconds / rules * 1e6:.0f} us a rule)")
    IptablesApplier().cleanup()


def in_private_netns(argv: list[str]) -> None:
    """Run this script again in a network namespace of its own, so the host's tables are never touched."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SystemExit("unshare (util-linux) is needed to run the benchmark in a private network namespace")
    os.execv(unshare, [unshare, "--net", sys.executable, __file__, *argv, INSIDE_FLAG])


# --- part 2: pod ready -> answering through its ClusterIP, on a running cluster --------------------------


BACKEND_COMMAND = ("mkdir -p /www && hostname > /www/index.html && touch /tmp/ready && "
                   "exec httpd -f -p 8080 -h /www")


def wait(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def measure_ready(args: argparse.Namespace) -> None:
    from daemons.api.client import ApiClient
    from daemons.api.resources import resolve

    pods, services, namespaces = resolve("pods"), resolve("services"), resolve("namespaces")
    client = ApiClient.from_config()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    client.create(namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    def ready() -> bool:
        status = client.get(pods, "backend", namespace).get("status") or {}
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])

    try:
        client.create(pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "backend",
                                                                             "labels": {"app": "backend"}},
                             "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
                                 "name": "httpd", "image": args.image, "command": ["sh", "-c", BACKEND_COMMAND],
                                 "ports": [{"name": "http", "containerPort": 8080}],
                                 "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]},
                                                    "periodSeconds": 1, "failureThreshold": 1,
                                                    "successThreshold": 1}}]}}, namespace)
        service = client.create(services, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "backend"},
                                           "spec": {"selector": {"app": "backend"},
                                                    "ports": [{"port": 80, "targetPort": "http"}]}}, namespace)
        url = f"http://{service['spec']['clusterIP']}/"
        wait(lambda: answers(url), args.timeout, "the first answer through the ClusterIP", interval=0.2)
        samples = []
        for change in range(args.changes):
            client.exec("backend", ["rm", "-f", "/tmp/ready"], namespace)
            wait(lambda: not answers(url), args.timeout, f"change {change}: the pod out of rotation")
            client.exec("backend", ["touch", "/tmp/ready"], namespace)
            wait(ready, args.timeout, f"change {change}: the pod Ready in the API")
            became_ready = time.perf_counter()
            wait(lambda: answers(url), args.timeout, f"change {change}: its answer through the ClusterIP")
            samples.append(time.perf_counter() - became_ready)
    finally:
        client.delete(namespaces, namespace)
    print(f"service programming, part 2: pod Ready in the API -> answering through its ClusterIP, "
          f"{len(samples)} changes\n")
    print(f"{'':<34}{'n':>4}{'p50 ms':>10}{'p99 ms':>10}")
    print(row("Ready -> answering", samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=("sync", "ready"), default="sync")
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--baseline", action="store_true", help="also time plain python-iptables once")
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--image", default="busybox")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(INSIDE_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "ready":
        measure_ready(args)
    elif args.inside_private_netns:
        measure_sync(args)
    else:
        in_private_netns(sys.argv[1:])


if __name__ == "__main__":
    main()
