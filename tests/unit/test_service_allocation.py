"""Cluster IP and node port allocation: ranges, picking, what a write claims and gives back, update semantics."""

import ipaddress
import random

import pytest

from daemons.api.errors import Invalid, ServerError
from daemons.api.resources import resolve
from daemons.apiserver import services
from daemons.apiserver.services import CLUSTER_IP_PREFIX, NODE_PORT_PREFIX, Held, ServiceNetwork
from daemons.apiserver.validation import validate

pytestmark = pytest.mark.unit

SERVICES = resolve("services")
NETWORK = ServiceNetwork.parse("10.96.0.0/16", "30000-32767")
NOTHING_HELD = Held()


def service(name="web", **spec):
    """A Service as the apiserver sees it after validation (defaults applied)."""
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}], **spec}}
    return validate(SERVICES, body)[0]


def allocate(desired, current=None, held=NOTHING_HELD, network=NETWORK, seed=1):
    return services.allocate(network, desired, current, held, random.Random(seed))


def causes(error):
    return {cause["field"]: cause["message"] for cause in error.value.causes}


def test_network_parses_ranges_and_knows_usable_addresses():
    network = ServiceNetwork.parse("10.100.0.0/29", "30000-30002")
    assert network.kubernetes_ip == "10.100.0.1"
    assert network.ip_count == 6
    assert [network.ip_at(offset) for offset in (0, 5)] == ["10.100.0.1", "10.100.0.6"]
    assert network.ip_offset("10.100.0.6") == 5
    assert network.ip_offset("10.100.0.0") is None and network.ip_offset("10.100.0.7") is None
    assert network.ip_offset("10.101.0.1") is None and network.ip_offset("bad") is None
    assert network.has_port(30002) and not network.has_port(30003) and network.port_range == "30000-30002"


@pytest.mark.parametrize(("cidr", "ports"), [
    ("10.96.0.1/16", "30000-32767"), ("fd00::/112", "30000-32767"), ("10.0.0.0/8", "30000-32767"),
    ("10.96.0.0/31", "30000-32767"), ("10.96.0.0/16", "32767-30000"), ("10.96.0.0/16", "x-y"),
    ("10.96.0.0/16", "0-10"),
])
def test_bad_ranges_are_refused(cidr, ports):
    with pytest.raises(ValueError):
        ServiceNetwork.parse(cidr, ports)


def test_pick_prefers_the_dynamic_band_then_fills_the_static_one():
    rng = random.Random(7)
    picked = {services.pick(10, set(), 4, rng) for _ in range(50)}
    assert picked <= set(range(4, 10))
    assert services.pick(10, set(range(4, 10)), 4, rng) in range(4)
    assert services.pick(10, set(range(10)), 4, rng) is None
    assert services.pick(3, {0, 2}, 0, rng) == 1


def test_static_band_is_sized_as_kubernetes():
    assert services.static_band(65534, 16, 256, 16) == 256
    assert services.static_band(2768, 16, 128, 32) == 86
    assert services.static_band(6, 16, 256, 16) == 0


def test_a_new_service_gets_a_dynamic_ip_and_claims_it():
    allocated, claims = allocate(service())
    ip = allocated["spec"]["clusterIP"]
    assert allocated["spec"]["clusterIPs"] == [ip]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network("10.96.0.0/16")
    assert NETWORK.ip_offset(ip) >= 256  # above the band kept for requested addresses
    assert claims.take == {CLUSTER_IP_PREFIX + ip: b"ns/web"} and claims.release == ()


def test_the_first_address_is_never_picked():
    network = ServiceNetwork.parse("10.100.0.0/30", "30000-30001")
    allocated, _claims = allocate(service(), network=network)
    assert allocated["spec"]["clusterIP"] == "10.100.0.2"
    with pytest.raises(ServerError, match="range is full"):
        allocate(service(), held=Held(ips=frozenset({"10.100.0.2"})), network=network)


def test_requested_ip_is_honoured_when_free():
    allocated, claims = allocate(service(clusterIP="10.96.0.50"))
    assert allocated["spec"]["clusterIPs"] == ["10.96.0.50"]
    assert list(claims.take) == [CLUSTER_IP_PREFIX + "10.96.0.50"]


def test_requested_ip_already_held_or_out_of_range_names_the_field():
    with pytest.raises(Invalid) as raised:
        allocate(service(clusterIP="10.96.0.50"), held=Held(ips=frozenset({"10.96.0.50"})))
    assert causes(raised) == {"spec.clusterIPs": 'Invalid value: []string{"10.96.0.50"}: failed to allocate IP '
                                                 "10.96.0.50: provided IP is already allocated"}
    with pytest.raises(Invalid) as raised:
        allocate(service(clusterIP="10.0.0.5"))
    assert "the provided IP (10.0.0.5) is not in the valid range. The range of valid IPs is 10.96.0.0/16" \
        in causes(raised)["spec.clusterIPs"]


def test_headless_and_external_name_services_take_nothing():
    headless, claims = allocate(service(clusterIP="None", ports=None))
    assert headless["spec"]["clusterIPs"] == ["None"] and claims.take == {}
    external = validate(SERVICES, {"metadata": {"name": "db", "namespace": "ns"},
                                   "spec": {"type": "ExternalName", "externalName": "db.example.com"}})[0]
    allocated, claims = allocate(external)
    assert "clusterIP" not in allocated["spec"] and claims.take == {}


def test_node_ports_are_allocated_requested_or_refused():
    spec = {"type": "NodePort", "ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "nodePort": 30053}]}
    allocated, claims = allocate(service(**spec))
    automatic = allocated["spec"]["ports"][0]["nodePort"]
    assert 30086 <= automatic <= 32767 and allocated["spec"]["ports"][1]["nodePort"] == 30053
    assert set(claims.take) == {CLUSTER_IP_PREFIX + allocated["spec"]["clusterIP"], f"{NODE_PORT_PREFIX}{automatic}",
                                f"{NODE_PORT_PREFIX}30053"}
    with pytest.raises(Invalid) as raised:
        allocate(service(**spec), held=Held(ports=frozenset({30053})))
    assert causes(raised) == {"spec.ports[1].nodePort": "Invalid value: 30053: provided port is already allocated"}
    spec["ports"][1]["nodePort"] = 8080
    with pytest.raises(Invalid) as raised:
        allocate(service(**spec))
    assert causes(raised)["spec.ports[1].nodePort"] == ("Invalid value: 8080: provided port is not in the valid "
                                                        "range. The range of valid ports is 30000-32767")


def test_node_port_range_full_is_a_server_error():
    network = ServiceNetwork.parse("10.100.0.0/24", "30000-30001")
    with pytest.raises(ServerError, match="failed to allocate a nodePort: range is full"):
        allocate(service(type="NodePort"), held=Held(ports=frozenset({30000, 30001})), network=network)


def test_an_update_keeps_what_it_holds_and_claims_only_what_is_new():
    current, _claims = allocate(service(type="NodePort", ports=[{"name": "a", "port": 80, "nodePort": 30001},
                                                                {"name": "b", "port": 81, "nodePort": 30002}]))
    desired = service(type="NodePort", clusterIP=current["spec"]["clusterIP"],
                      ports=[{"name": "a", "port": 80, "nodePort": 30001},
                             {"name": "c", "port": 82, "nodePort": 30003}])
    assert services.asks_for_new_values(desired, current)
    allocated, claims = allocate(desired, current, held=Held(ports=frozenset({30002})))
    assert claims.take == {f"{NODE_PORT_PREFIX}30003": b"ns/web"}
    assert claims.release == (f"{NODE_PORT_PREFIX}30002",)
    assert not services.asks_for_new_values(allocated, allocated)


def test_the_cluster_ip_is_immutable():
    current, _claims = allocate(service(clusterIP="10.96.0.60"))
    with pytest.raises(Invalid) as raised:
        validate(SERVICES, service(clusterIP="10.96.0.61"), current=current)
    assert causes(raised) == {"spec.clusterIP": 'Invalid value: "10.96.0.61": field is immutable'}


def test_carry_over_keeps_allocated_values_a_replace_leaves_out():
    current, _claims = allocate(service(type="NodePort", ports=[{"name": "http", "port": 80}]))
    replaced = {"metadata": {"name": "web"}, "spec": {"type": "NodePort", "ports": [{"name": "http", "port": 8080}]}}
    carried = services.carry_over(current, replaced)["spec"]
    assert carried["clusterIP"] == current["spec"]["clusterIP"]
    assert carried["clusterIPs"] == current["spec"]["clusterIPs"]
    assert carried["ports"] == [{"name": "http", "port": 8080, "nodePort": current["spec"]["ports"][0]["nodePort"]}]


def test_carry_over_drops_what_only_the_old_type_had():
    current, _claims = allocate(service(type="NodePort"))
    to_cluster_ip = {**current, "spec": {**current["spec"], "type": "ClusterIP"}}
    spec = services.carry_over(current, to_cluster_ip)["spec"]
    assert "nodePort" not in spec["ports"][0] and "externalTrafficPolicy" not in spec
    _allocated, claims = allocate(validate(SERVICES, {**to_cluster_ip, "spec": spec})[0], current)
    assert claims.release == (f"{NODE_PORT_PREFIX}{current['spec']['ports'][0]['nodePort']}",)
    assert claims.take == {}

    to_external = {**current, "spec": {**current["spec"], "type": "ExternalName", "externalName": "db.example"}}
    spec = services.carry_over(current, to_external)["spec"]
    assert "clusterIP" not in spec and "clusterIPs" not in spec and "ipFamilies" not in spec


def test_carry_over_leaves_bodies_it_cannot_read_to_validation():
    current, _claims = allocate(service())
    assert services.carry_over(current, {"spec": "nonsense"}) == {"spec": "nonsense"}
    ports = services.carry_over(current, {"spec": {"ports": ["x"]}})["spec"]["ports"]
    assert ports == ["x"]


def test_held_by_others_leaves_out_what_the_service_itself_holds():
    current, claims = allocate(service(type="NodePort"))
    keys = [*claims.take, CLUSTER_IP_PREFIX + "10.96.9.9", NODE_PORT_PREFIX + "30999"]
    assert services.held_by_others(keys, current) == Held(frozenset({"10.96.9.9"}), frozenset({30999}))
    assert services.claim_keys(current) == set(claims.take)


def test_this_cluster_is_ipv4_single_stack():
    with pytest.raises(Invalid) as raised:
        service(ipFamilies=["IPv6"], ipFamilyPolicy="RequireDualStack")
    assert set(causes(raised)) == {"spec.ipFamilies[0]", "spec.ipFamilyPolicy"}
