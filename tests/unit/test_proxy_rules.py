"""The proxy's ruleset, rendered from Services and Endpoints as the API serves them, read as iptables-save shows it."""

from __future__ import annotations

import copy
import random

import pytest

from daemons.proxy.proxier import describe_changes
from daemons.proxy.rules import FILTER, NAT, NodeFacts, endpoint_chain, probability, render, service_chain
from daemons.proxy.services import service_ports

pytestmark = pytest.mark.unit

MASQ = "0x4000/0x4000"


def service(name: str, ports: list[dict], cluster_ip: str | None = "10.96.0.10", kind: str = "ClusterIP",
            namespace: str = "default") -> dict:
    spec: dict = {"type": kind, "ports": ports, "selector": {"app": name}}
    if cluster_ip is not None:
        spec["clusterIP"] = cluster_ip
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def endpoints(name: str, ips: list[str], ports: list[dict], not_ready: list[str] = (),
              namespace: str = "default") -> dict:
    subset = {"addresses": [{"ip": ip} for ip in ips], "ports": ports}
    if not_ready:
        subset["notReadyAddresses"] = [{"ip": ip} for ip in not_ready]
    return {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace},
            "subsets": [subset]}


WEB = service("web", [{"name": "http", "port": 80, "targetPort": "web"}])
WEB_ENDPOINTS = endpoints("web", ["10.244.1.5", "10.244.1.3", "10.244.2.7"], [{"name": "http", "port": 8080}])


def rules(ruleset, chain: str, table: str = NAT) -> list[str]:
    return [str(rule) for rule in ruleset.chain(table, chain)]


def svc_chain_of(ruleset, key: str) -> str:
    """The KUBE-SVC chain KUBE-SERVICES sends ``key`` to."""
    return next(rule.target for rule in ruleset.chain(NAT, "KUBE-SERVICES")
                if rule.target.startswith("KUBE-SVC-") and f'"{key}"' in str(rule))


def test_cluster_ip_goes_to_its_service_chain_and_outside_traffic_is_masqueraded():
    ruleset = render([WEB], [WEB_ENDPOINTS])
    svc = svc_chain_of(ruleset, "default/web:http")
    assert rules(ruleset, "KUBE-SERVICES") == [
        '! -s 10.244.0.0/16 -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http" -m tcp --dport 80 '
        "-j KUBE-MARK-MASQ",
        f'-d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http" -m tcp --dport 80 -j {svc}',
        '-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" '
        "-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
    ]


def test_three_endpoints_are_chosen_with_probabilities_one_third_one_half_then_always():
    ruleset = render([WEB], [WEB_ENDPOINTS])
    spread = ruleset.chain(NAT, svc_chain_of(ruleset, "default/web:http"))
    assert [str(rule).split(" -j ")[0] for rule in spread] == [
        '-m comment --comment "default/web:http" -m statistic --mode random --probability 0.33333333349',
        '-m comment --comment "default/web:http" -m statistic --mode random --probability 0.50000000000',
        '-m comment --comment "default/web:http"',
    ]
    # Each endpoint chain DNATs to one endpoint (sorted by address), and marks hairpin traffic for SNAT.
    destinations = []
    for rule in spread:
        masq, dnat = rules(ruleset, rule.target)
        destinations.append(dnat.split("--to-destination ")[1])
        ip = destinations[-1].split(":")[0]
        assert masq == f'-s {ip}/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ'
        assert dnat.startswith('-p tcp -m comment --comment "default/web:http" -j DNAT')
    assert destinations == ["10.244.1.3:8080", "10.244.1.5:8080", "10.244.2.7:8080"]


def test_probability_is_spelled_as_the_kernel_keeps_it():
    assert [probability(n) for n in (4, 3, 2)] == ["0.25000000000", "0.33333333349", "0.50000000000"]


def test_one_endpoint_gets_a_single_unconditional_rule():
    ruleset = render([WEB], [endpoints("web", ["10.244.1.3"], [{"name": "http", "port": 8080}])])
    (only,) = ruleset.chain(NAT, svc_chain_of(ruleset, "default/web:http"))
    assert "statistic" not in str(only)


def test_node_port_marks_for_masquerade_then_goes_to_the_service_chain():
    web = service("web", [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}], kind="NodePort")
    ruleset = render([web], [WEB_ENDPOINTS])
    svc = svc_chain_of(ruleset, "default/web:http")
    assert rules(ruleset, "KUBE-NODEPORTS") == [
        '-p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j KUBE-MARK-MASQ',
        f'-p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j {svc}',
    ]
    assert rules(ruleset, "KUBE-SERVICES")[-1].endswith("-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS")


def test_load_balancer_is_served_like_a_node_port_and_cluster_ip_ignores_node_ports():
    ports = [{"name": "http", "port": 80, "nodePort": 30081}]
    balanced = render([service("web", ports, kind="LoadBalancer")], [WEB_ENDPOINTS])
    assert len(balanced.chain(NAT, "KUBE-NODEPORTS")) == 2
    plain = render([service("web", ports)], [WEB_ENDPOINTS])
    assert plain.chain(NAT, "KUBE-NODEPORTS") == ()


def test_no_ready_endpoints_rejects_in_the_filter_table_and_writes_no_nat_rules():
    web = service("web", [{"name": "http", "port": 80, "nodePort": 30080}], kind="NodePort")
    waiting = endpoints("web", [], [{"name": "http", "port": 8080}], not_ready=["10.244.1.3"])
    for ruleset in (render([web], [waiting]), render([web], [])):
        assert rules(ruleset, "KUBE-SERVICES", FILTER) == [
            '-d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http has no endpoints" -m tcp --dport 80 '
            "-j REJECT --reject-with icmp-port-unreachable",
            '-p tcp -m comment --comment "default/web:http has no endpoints" -m addrtype --dst-type LOCAL '
            "-m tcp --dport 30080 -j REJECT --reject-with icmp-port-unreachable",
        ]
        assert len(ruleset.chain(NAT, "KUBE-SERVICES")) == 1  # only the jump to KUBE-NODEPORTS
        assert not [chain for chain in ruleset.tables[NAT] if chain.startswith(("KUBE-SVC-", "KUBE-SEP-"))]


def test_not_ready_addresses_take_no_traffic():
    mixed = endpoints("web", ["10.244.1.3"], [{"name": "http", "port": 8080}], not_ready=["10.244.1.9"])
    ruleset = render([WEB], [mixed])
    assert "10.244.1.9" not in ruleset.save()
    assert "--to-destination 10.244.1.3:8080" in ruleset.save()


def test_headless_and_external_name_services_get_no_rules():
    headless = service("db", [{"name": "sql", "port": 5432}], cluster_ip="None")
    external = service("ext", [{"port": 80}], cluster_ip=None, kind="ExternalName")
    ruleset = render([headless, external], [endpoints("db", ["10.244.1.3"], [{"name": "sql", "port": 5432}])])
    assert ruleset == render([], [])
    assert "default/db" not in ruleset.save()


def test_named_target_ports_use_the_numbers_the_endpoints_carry_per_port_name():
    multi = service("app", [{"name": "http", "port": 80, "targetPort": "web"},
                            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"}])
    ready = endpoints("app", ["10.244.1.3"], [{"name": "http", "port": 8080},
                                               {"name": "dns", "port": 5353, "protocol": "UDP"}])
    ruleset = render([multi], [ready])
    http = ruleset.chain(NAT, svc_chain_of(ruleset, "default/app:http"))[0].target
    dns = ruleset.chain(NAT, svc_chain_of(ruleset, "default/app:dns"))[0].target
    assert rules(ruleset, http)[1].endswith("-p tcp -m comment --comment \"default/app:http\" "
                                            "-j DNAT --to-destination 10.244.1.3:8080")
    assert rules(ruleset, dns)[1] == ('-p udp -m comment --comment "default/app:dns" '
                                      "-j DNAT --to-destination 10.244.1.3:5353")
    assert '-d 10.96.0.10/32 -p udp -m comment --comment "default/app:dns" -m udp --dport 53' in ruleset.save()


def test_an_unnamed_port_is_keyed_by_the_service_alone():
    single = service("one", [{"port": 80, "targetPort": 8080}])
    ruleset = render([single], [endpoints("one", ["10.244.1.3"], [{"port": 8080}])])
    assert '--comment "default/one"' in str(ruleset.chain(NAT, "KUBE-SERVICES")[1])


def test_chain_names_hash_the_port_protocol_and_endpoint_like_kube_proxy():
    (port,) = service_ports([WEB], [WEB_ENDPOINTS])
    svc = service_chain(port)
    sep = endpoint_chain(port, "10.244.1.3:8080")
    assert svc == "KUBE-SVC-CDGGSHYLG3RE2FKL"
    assert len(svc) == len("KUBE-SVC-") + 16 and len(sep) == len("KUBE-SEP-") + 16
    assert endpoint_chain(port, "10.244.1.5:8080") != sep


def test_masquerade_mark_and_postrouting_follow_the_mark_bit():
    ruleset = render([], [])
    assert rules(ruleset, "KUBE-MARK-MASQ") == [f"-j MARK --set-xmark {MASQ}"]
    assert rules(ruleset, "KUBE-POSTROUTING") == [
        f"-m mark ! --mark {MASQ} -j RETURN",
        "-j MARK --set-xmark 0x4000/0x0",
        '-m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE',
    ]
    assert rules(ruleset, "KUBE-FORWARD", FILTER) == [
        f'-m comment --comment "kubernetes forwarding rules" -m mark --mark {MASQ} -j ACCEPT',
        '-m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED '
        "-j ACCEPT",
    ]
    other = render([], [], NodeFacts(cluster_cidr="10.32.0.0/12", masquerade_bit=15))
    assert rules(other, "KUBE-MARK-MASQ") == ["-j MARK --set-xmark 0x8000/0x8000"]
    web = render([WEB], [WEB_ENDPOINTS], NodeFacts(cluster_cidr="10.32.0.0/12", masquerade_bit=15))
    assert rules(web, "KUBE-SERVICES")[0].startswith("! -s 10.32.0.0/12 -d 10.96.0.10/32")


def test_built_in_chains_jump_into_ours():
    assert [f"-t {jump.table} -A {jump.chain} {jump.rule}" for jump in render([], []).jumps] == [
        '-t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-t nat -A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-t nat -A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        '-t filter -A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" '
        "-j KUBE-SERVICES",
        '-t filter -A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        '-t filter -A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" '
        "-j KUBE-SERVICES",
        '-t filter -A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" '
        "-j KUBE-SERVICES",
    ]


def test_every_chain_jumped_to_is_rendered_and_every_rendered_chain_is_ours():
    web = service("web", [{"name": "http", "port": 80, "nodePort": 30080}], kind="NodePort")
    ruleset = render([web, service("api", [{"port": 443}], cluster_ip="10.96.0.1")],
                     [WEB_ENDPOINTS, endpoints("api", ["192.168.1.10"], [{"port": 6443}])])
    for table, chains in ruleset.tables.items():
        assert all(name.startswith("KUBE-") for name in chains)
        for rule in (rule for chain in chains.values() for rule in chain):
            if rule.target.startswith("KUBE-"):
                assert rule.target in chains, f"{table}: {rule} jumps to a chain that is not rendered"


def test_rendering_is_deterministic_whatever_the_input_order():
    services = [service(f"s{i}", [{"name": "p", "port": 80 + i}], cluster_ip=f"10.96.1.{i}") for i in range(1, 6)]
    ready = [endpoints(f"s{i}", [f"10.244.{i}.{j}" for j in range(1, 4)], [{"name": "p", "port": 8080}])
             for i in range(1, 6)]
    expected = render(services, ready).save()
    for seed in range(5):
        shuffled_services, shuffled_endpoints = copy.deepcopy(services), copy.deepcopy(ready)
        random.Random(seed).shuffle(shuffled_services)
        random.Random(seed + 100).shuffle(shuffled_endpoints)
        for item in shuffled_endpoints:
            random.Random(seed).shuffle(item["subsets"][0]["addresses"])
        assert render(shuffled_services, shuffled_endpoints).save() == expected


def test_a_changed_endpoint_changes_only_its_own_chains():
    before = render([WEB], [WEB_ENDPOINTS])
    moved = endpoints("web", ["10.244.1.5", "10.244.1.3", "10.244.2.8"], [{"name": "http", "port": 8080}])
    after = render([WEB], [moved])
    removed = set(before.tables[NAT]) - set(after.tables[NAT])
    added = set(after.tables[NAT]) - set(before.tables[NAT])
    assert len(removed) == len(added) == 1 and removed.pop().startswith("KUBE-SEP-")
    assert "--to-destination 10.244.2.8:8080" in str(after.chain(NAT, added.pop())[1])


def test_changes_are_described_per_service_port():
    old = service_ports([WEB], [WEB_ENDPOINTS])
    new = service_ports([WEB, service("api", [{"port": 443}], cluster_ip="10.96.0.1")],
                        [endpoints("web", ["10.244.1.3"], [{"name": "http", "port": 8080}])])
    assert describe_changes(old, new) == [
        "default/api: added, 10.96.0.1:443/tcp -> 0 ready endpoints",
        "default/web:http: changed, 10.96.0.10:80/tcp -> 1 ready endpoints",
    ]
    assert describe_changes(new, []) == ["default/api: removed", "default/web:http: removed"]
