"""flanneld's pure decisions: records, subnet choice, the subnet file, the wanted kernel state, the iptables rules."""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Network

import pytest

from daemons.flannel.network import (
    FdbEntry,
    Lease,
    Neighbour,
    NetworkConfig,
    Route,
    choose_subnet,
    desired_peers,
    diff,
    forward_rules,
    parse_lease,
    parse_subnet_key,
    pick_lease,
    postrouting_rules,
    previous_subnet,
    render_subnet_file,
    stale_leases,
    subnet_key,
    vtep_mac,
)
from daemons.flannel.settings import FlannelSettings
from daemons.machinery.settings import parse_settings

pytestmark = pytest.mark.unit

CONFIG = NetworkConfig(IPv4Network("10.244.0.0/16"))
NODE_A = IPv4Address("192.168.77.11")
NODE_B = IPv4Address("192.168.77.12")
NODE_C = IPv4Address("192.168.77.13")


def lease(subnet: str, ip: IPv4Address, vni: int = 1) -> Lease:
    return Lease(IPv4Network(subnet), ip, vtep_mac(ip, vni), vni)


def test_config_round_trips_in_flannels_json_shape():
    raw = CONFIG.to_json()
    assert json.loads(raw) == {"Network": "10.244.0.0/16", "SubnetLen": 24,
                               "Backend": {"Type": "vxlan", "VNI": 1, "Port": 8472}}
    assert NetworkConfig.from_json(raw) == CONFIG


def test_config_written_by_flannel_itself_takes_flannels_defaults():
    stored = NetworkConfig.from_json('{"Network": "10.10.0.0/16", "Backend": {"Type": "vxlan"}}')
    assert stored == NetworkConfig(IPv4Network("10.10.0.0/16"), 24, 1, 8472)


def test_config_with_another_backend_or_a_subnet_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="host-gw"):
        NetworkConfig.from_json('{"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}')
    with pytest.raises(ValueError, match="SubnetLen"):
        NetworkConfig(IPv4Network("10.244.0.0/16"), subnet_len=16)


def test_lease_key_and_value_are_flannels():
    record = lease("10.244.3.0/24", NODE_A)
    key = subnet_key("/coreos.com/network", record.subnet)
    assert key == "/coreos.com/network/subnets/10.244.3.0-24"
    assert json.loads(record.to_json()) == {
        "PublicIP": "192.168.77.11", "BackendType": "vxlan",
        "BackendData": {"VNI": 1, "VtepMAC": record.vtep_mac},
    }
    assert parse_subnet_key(key) == IPv4Network("10.244.3.0/24")
    assert parse_lease(key, record.to_json()) == record


def test_leases_of_other_backends_or_garbage_are_ignored():
    key = "/coreos.com/network/subnets/10.244.3.0-24"
    assert parse_lease(key, b'{"PublicIP": "192.168.77.11", "BackendType": "udp"}') is None
    assert parse_lease(key, b"not json") is None
    assert parse_lease("/coreos.com/network/subnets/garbage", lease("10.244.3.0/24", NODE_A).to_json()) is None


def test_vtep_mac_is_stable_locally_administered_unicast_and_differs_per_node():
    mac = vtep_mac(NODE_A, 1)
    assert mac == vtep_mac(NODE_A, 1)
    assert mac != vtep_mac(NODE_B, 1)
    first = int(mac.split(":")[0], 16)
    assert first & 0x02 and not first & 0x01


def test_subnet_choice_skips_the_first_subnet_and_taken_ones():
    small = NetworkConfig(IPv4Network("10.244.0.0/22"))  # four /24s: .0 is never handed out
    taken = {IPv4Network("10.244.1.0/24"), IPv4Network("10.244.2.0/24")}
    assert choose_subnet(small, taken, NODE_A) == IPv4Network("10.244.3.0/24")
    assert choose_subnet(small, taken | {IPv4Network("10.244.3.0/24")}, NODE_A) is None


def test_subnet_choice_is_deterministic_per_node_and_spreads_nodes():
    picks = {ip: choose_subnet(CONFIG, set(), ip) for ip in (NODE_A, NODE_B, NODE_C)}
    assert picks == {ip: choose_subnet(CONFIG, set(), ip) for ip in (NODE_A, NODE_B, NODE_C)}
    assert len(set(picks.values())) == 3
    assert all(subnet != IPv4Network("10.244.0.0/24") and subnet.subnet_of(CONFIG.network)
               for subnet in picks.values())


def test_a_restarted_node_keeps_the_subnet_of_its_subnet_file_when_free_or_its_own():
    previous = IPv4Network("10.244.7.0/24")
    assert pick_lease(CONFIG, [], NODE_A, previous) == (previous, False)
    assert pick_lease(CONFIG, [lease("10.244.7.0/24", NODE_A)], NODE_A, previous) == (previous, True)


def test_a_node_without_subnet_file_reclaims_the_lease_carrying_its_address():
    leases = [lease("10.244.9.0/24", NODE_B), lease("10.244.12.0/24", NODE_A)]
    assert pick_lease(CONFIG, leases, NODE_A, None) == (IPv4Network("10.244.12.0/24"), True)


def test_a_subnet_file_naming_another_nodes_subnet_or_another_network_is_not_followed():
    taken = [lease("10.244.7.0/24", NODE_B)]
    subnet, held = pick_lease(CONFIG, taken, NODE_A, IPv4Network("10.244.7.0/24"))
    assert subnet != IPv4Network("10.244.7.0/24") and not held
    assert pick_lease(CONFIG, [], NODE_A, IPv4Network("10.99.7.0/24")) == (choose_subnet(CONFIG, [], NODE_A), False)
    assert pick_lease(CONFIG, [], NODE_A, IPv4Network("10.244.0.0/24"))[0] != IPv4Network("10.244.0.0/24")


def test_older_leases_of_this_node_are_stale_and_other_nodes_leases_are_not():
    own, older, other = lease("10.244.3.0/24", NODE_A), lease("10.244.8.0/24", NODE_A), lease("10.244.9.0/24", NODE_B)
    assert stale_leases([own, older, other], own.subnet, NODE_A) == [older]


def test_subnet_file_is_flannels_and_reads_back():
    text = render_subnet_file(CONFIG, IPv4Network("10.244.3.0/24"), 1450, True)
    assert text == ("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\n"
                    "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
    assert previous_subnet(text) == IPv4Network("10.244.3.0/24")
    assert "FLANNEL_IPMASQ=false" in render_subnet_file(CONFIG, IPv4Network("10.244.3.0/24"), 1450, False)
    assert previous_subnet("") is None
    assert previous_subnet("FLANNEL_SUBNET=garbage\n") is None


def test_every_other_lease_gets_a_route_a_neighbour_and_an_fdb_entry():
    own = lease("10.244.3.0/24", NODE_A)
    other = lease("10.244.5.0/24", NODE_B)
    state = desired_peers(CONFIG, [own, other], own.subnet, NODE_A)
    assert state.routes == {Route(IPv4Network("10.244.5.0/24"), IPv4Address("10.244.5.0"))}
    assert state.neighbours == {Neighbour(IPv4Address("10.244.5.0"), other.vtep_mac)}
    assert state.fdb == {FdbEntry(other.vtep_mac, NODE_B)}


def test_stale_leases_of_this_node_and_foreign_leases_are_not_routed():
    own = IPv4Network("10.244.3.0/24")
    leases = [
        lease("10.244.8.0/24", NODE_A),  # an older lease of this very node
        lease("10.244.9.0/24", NODE_B, vni=2),  # another overlay
        lease("10.99.1.0/24", NODE_C),  # outside the network
    ]
    assert desired_peers(CONFIG, leases, own, NODE_A).routes == set()


def test_diff_adds_what_is_missing_and_removes_what_is_stale():
    keep = Route(IPv4Network("10.244.5.0/24"), IPv4Address("10.244.5.0"))
    new = Route(IPv4Network("10.244.6.0/24"), IPv4Address("10.244.6.0"))
    gone = Route(IPv4Network("10.244.7.0/24"), IPv4Address("10.244.7.0"))
    changes = diff({keep, new}, {keep, gone})
    assert changes.add == {new} and changes.remove == {gone}
    assert not diff({keep}, {keep})


def test_iptables_rules_keep_pod_traffic_and_masquerade_the_rest_except_multicast():
    network = CONFIG.network
    assert [rule.args() for rule in postrouting_rules(network)] == [
        "-s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN",
        "-s 10.244.0.0/16 -d 224.0.0.0/4 -j RETURN",
        "-s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE",
    ]
    assert [rule.args() for rule in forward_rules(network)] == [
        "-s 10.244.0.0/16 -j ACCEPT", "-d 10.244.0.0/16 -j ACCEPT",
    ]


def test_settings_defaults_and_flags():
    defaults = parse_settings(FlannelSettings, [], environ={})
    assert defaults.network_config() == CONFIG
    assert defaults.etcd_endpoints == ["http://127.0.0.1:2379"]
    assert defaults.subnet_lease_ttl_seconds == 86400 and defaults.ip_masq and not defaults.release
    given = parse_settings(FlannelSettings, [
        "--etcd-endpoints", "http://10.0.0.1:2379,http://10.0.0.2:2379", "--network", "10.10.0.0/16",
        "--subnet-len", "26", "--vni", "4", "--public-ip", "192.168.77.11", "--no-ip-masq", "--release",
    ], environ={})
    assert given.etcd_endpoints == ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
    assert given.network_config() == NetworkConfig(IPv4Network("10.10.0.0/16"), 26, 4, 8472)
    assert given.public_ip == NODE_A and not given.ip_masq and given.release


def test_settings_refuse_a_subnet_length_that_does_not_fit(capsys):
    with pytest.raises(SystemExit):
        parse_settings(FlannelSettings, ["--network", "10.244.0.0/16", "--subnet-len", "12"], environ={})
    assert "SubnetLen 12" in capsys.readouterr().err
