"""Service cluster IPs and node ports from the real apiserver over real etcd, as a user sees them.

Addresses and ports these tests ask for by value lie in the low bands dynamic allocation leaves alone
(10.96.0.2-10.96.1.0, 30000-30085), so Services other tests create never take them first.
"""

import contextlib
import ipaddress
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from daemons.api import errors
from daemons.api.resources import resolve
from tests.conftest import delete_namespace, upstream_kubectls

pytestmark = pytest.mark.integration

SERVICES = resolve("services")
ENDPOINTS = resolve("endpoints")
NAMESPACES = resolve("namespaces")
SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/16")


def service(name, **spec):
    spec.setdefault("ports", [{"name": "http", "port": 80, "targetPort": 8080}])
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, **spec}}


def node_port_service(name, *node_ports):
    ports = [{"name": f"p{index}", "port": 80 + index, **({"nodePort": port} if port else {})}
             for index, port in enumerate(node_ports)]
    return service(name, type="NodePort", ports=ports)


def invalid(call):
    """The causes of the 422 that ``call`` must raise, by field."""
    with pytest.raises(errors.Invalid) as raised:
        call()
    return {cause["field"]: cause["message"] for cause in raised.value.causes}


def assert_absent(api, name, namespace):
    with pytest.raises(errors.NotFound):
        api.get(SERVICES, name, namespace)


@contextlib.contextmanager
def scratch_namespace(api):
    name = f"svc-{uuid.uuid4().hex[:10]}"
    api.create(NAMESPACES, {"metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(errors.NotFound):
            api.delete(NAMESPACES, name)


@pytest.fixture(scope="module")
def second_apiserver(apiserver, apiserver_factory):
    """Another apiserver on the same etcd, started after the session's own."""
    return apiserver_factory()


@pytest.fixture(scope="module")
def small_apiserver(apiserver, apiserver_factory):
    """An apiserver on the same etcd with ranges small enough to fill: 5 dynamic addresses, 2 node ports."""
    return apiserver_factory(extra_args=["--service-cluster-ip-range", "10.112.0.0/29",
                                         "--service-node-port-range", "29990-29991"])


def test_a_service_gets_a_cluster_ip_from_the_range_and_upstream_defaults(api, namespace):
    created = api.create(SERVICES, service("web", ports=[{"port": 80}]), namespace)

    spec = created["spec"]
    assert ipaddress.ip_address(spec["clusterIP"]) in SERVICE_RANGE
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["type"] == "ClusterIP" and spec["sessionAffinity"] == "None"
    assert spec["ports"] == [{"protocol": "TCP", "port": 80, "targetPort": 80}]
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    assert spec["internalTrafficPolicy"] == "Cluster" and "externalTrafficPolicy" not in spec
    assert api.get(SERVICES, "web", namespace) == created


def test_fifty_concurrent_creates_on_two_apiservers_get_fifty_distinct_ips(api, second_apiserver, namespace):
    other = second_apiserver.client()
    try:
        clients = [api, other]
        with ThreadPoolExecutor(max_workers=16) as pool:
            created = list(pool.map(lambda index: clients[index % 2].create(SERVICES, service(f"web-{index}"),
                                                                            namespace), range(50)))
    finally:
        other.close()

    ips = {item["spec"]["clusterIP"] for item in created}
    assert len(ips) == 50
    assert all(ipaddress.ip_address(ip) in SERVICE_RANGE for ip in ips)
    listed = api.list(SERVICES, namespace)["items"]
    assert {item["spec"]["clusterIP"] for item in listed} == ips


def test_deleting_a_service_releases_its_ip(api, namespace):
    api.create(SERVICES, service("first", clusterIP="10.96.0.201"), namespace)
    api.delete(SERVICES, "first", namespace)

    again = api.create(SERVICES, service("second", clusterIP="10.96.0.201"), namespace)

    assert again["spec"]["clusterIPs"] == ["10.96.0.201"]


def test_a_requested_ip_is_honoured_once_and_refused_when_in_use(api, namespace):
    honoured = api.create(SERVICES, service("owner", clusterIP="10.96.0.202"), namespace)
    assert honoured["spec"]["clusterIP"] == "10.96.0.202" and honoured["spec"]["clusterIPs"] == ["10.96.0.202"]

    found = invalid(lambda: api.create(SERVICES, service("thief", clusterIP="10.96.0.202"), namespace))

    assert found == {"spec.clusterIPs": 'Invalid value: []string{"10.96.0.202"}: failed to allocate IP 10.96.0.202: '
                                        "provided IP is already allocated"}
    assert_absent(api, "thief", namespace)
    assert api.get(SERVICES, "owner", namespace)["spec"]["clusterIP"] == "10.96.0.202"


def test_an_ip_out_of_range_or_malformed_is_refused_and_nothing_written(api, namespace):
    found = invalid(lambda: api.create(SERVICES, service("outside", clusterIP="10.0.0.5"), namespace))
    assert found["spec.clusterIPs"].endswith("failed to allocate IP 10.0.0.5: the provided IP (10.0.0.5) is not in "
                                             "the valid range. The range of valid IPs is 10.96.0.0/16")
    found = invalid(lambda: api.create(SERVICES, service("garbled", clusterIP="10.96.0.999"), namespace))
    assert found["spec.clusterIPs[0]"].startswith('Invalid value: "10.96.0.999": must be a valid IP address')

    assert api.list(SERVICES, namespace)["items"] == []


def test_a_create_that_fails_takes_nothing(api, namespace):
    api.create(SERVICES, node_port_service("web", 30015), namespace)

    with pytest.raises(errors.AlreadyExists):
        api.create(SERVICES, service("web", clusterIP="10.96.0.206"), namespace)
    half_bad = node_port_service("half", 30016, 30015)
    half_bad["spec"]["clusterIP"] = "10.96.0.207"
    assert "spec.ports[1].nodePort" in invalid(lambda: api.create(SERVICES, half_bad, namespace))

    assert api.create(SERVICES, service("a", clusterIP="10.96.0.206"), namespace)["spec"]["clusterIP"] == "10.96.0.206"
    retry = node_port_service("b", 30016)
    retry["spec"]["clusterIP"] = "10.96.0.207"
    reused = api.create(SERVICES, retry, namespace)
    assert reused["spec"]["clusterIP"] == "10.96.0.207" and reused["spec"]["ports"][0]["nodePort"] == 30016


def test_headless_services_take_no_ip(api, namespace):
    created = api.create(SERVICES, service("db", clusterIP="None", ports=[]), namespace)
    assert created["spec"]["clusterIP"] == "None" and created["spec"]["clusterIPs"] == ["None"]


def test_validation_names_the_field(api, namespace):
    two_unnamed = service("two", ports=[{"port": 80}, {"port": 81}])
    assert invalid(lambda: api.create(SERVICES, two_unnamed, namespace)) == {"spec.ports[0].name": "Required value"}
    node_port_on_cluster_ip = service("np", ports=[{"port": 80, "nodePort": 30050}])
    assert invalid(lambda: api.create(SERVICES, node_port_on_cluster_ip, namespace)) == {
        "spec.ports[0].nodePort": "Forbidden: may not be used when `type` is 'ClusterIP'"}
    assert "spec.ports" in invalid(lambda: api.create(SERVICES, service("none", ports=[]), namespace))
    assert "spec.selector.app" in invalid(lambda: api.create(SERVICES, service("sel", selector={"app": 7}),
                                                             namespace))
    assert api.list(SERVICES, namespace)["items"] == []


def test_node_ports_are_allocated_honoured_refused_and_released(api, namespace):
    created = api.create(SERVICES, node_port_service("web", None, 30011), namespace)
    automatic, requested = (port["nodePort"] for port in created["spec"]["ports"])
    assert 30000 <= automatic <= 32767 and requested == 30011
    assert created["spec"]["externalTrafficPolicy"] == "Cluster"

    found = invalid(lambda: api.create(SERVICES, node_port_service("thief", 30011), namespace))
    assert found == {"spec.ports[0].nodePort": "Invalid value: 30011: provided port is already allocated"}
    found = invalid(lambda: api.create(SERVICES, node_port_service("low", 8080), namespace))
    assert found == {"spec.ports[0].nodePort": "Invalid value: 8080: provided port is not in the valid range. The "
                                               "range of valid ports is 30000-32767"}
    assert_absent(api, "thief", namespace)
    assert_absent(api, "low", namespace)

    api.delete(SERVICES, "web", namespace)
    again = api.create(SERVICES, node_port_service("again", automatic, 30011), namespace)
    assert [port["nodePort"] for port in again["spec"]["ports"]] == [automatic, 30011]


def test_changing_type_to_cluster_ip_releases_the_node_ports(api, namespace):
    created = api.create(SERVICES, node_port_service("web", 30021), namespace)

    changed = api.patch(SERVICES, "web", {"spec": {"type": "ClusterIP"}}, namespace)

    assert "nodePort" not in changed["spec"]["ports"][0] and "externalTrafficPolicy" not in changed["spec"]
    assert changed["spec"]["clusterIP"] == created["spec"]["clusterIP"]
    taken = api.create(SERVICES, node_port_service("next", 30021), namespace)
    assert taken["spec"]["ports"][0]["nodePort"] == 30021


def test_an_update_that_drops_a_port_releases_its_node_port(api, namespace):
    created = api.create(SERVICES, node_port_service("web", 30031, 30032), namespace)
    created["spec"]["ports"] = created["spec"]["ports"][:1]

    api.replace(SERVICES, created, namespace)

    assert [port["nodePort"] for port in api.get(SERVICES, "web", namespace)["spec"]["ports"]] == [30031]
    assert api.create(SERVICES, node_port_service("next", 30032), namespace)["spec"]["ports"][0]["nodePort"] == 30032


def test_the_cluster_ip_is_immutable_but_a_replace_without_it_keeps_it(api, namespace):
    created = api.create(SERVICES, node_port_service("web", None), namespace)
    ip, node_port = created["spec"]["clusterIP"], created["spec"]["ports"][0]["nodePort"]

    found = invalid(lambda: api.patch(SERVICES, "web", {"spec": {"clusterIP": "10.96.0.203",
                                                                 "clusterIPs": ["10.96.0.203"]}}, namespace))
    assert found == {"spec.clusterIP": 'Invalid value: "10.96.0.203": field is immutable'}

    manifest = node_port_service("web", None)
    manifest["metadata"]["labels"] = {"tier": "front"}
    replaced = api.replace(SERVICES, manifest, namespace)

    assert replaced["metadata"]["labels"] == {"tier": "front"}
    assert replaced["spec"]["clusterIP"] == ip and replaced["spec"]["clusterIPs"] == [ip]
    assert replaced["spec"]["ports"][0]["nodePort"] == node_port
    # The address was never given up: nobody else may take it.
    assert "spec.clusterIPs" in invalid(lambda: api.create(SERVICES, service("thief", clusterIP=ip), namespace))


def test_deleting_the_namespace_releases_its_services_values(api, namespace):
    with scratch_namespace(api) as doomed:
        api.create(SERVICES, node_port_service("web", 30041), doomed)
        api.patch(SERVICES, "web", {"spec": {"selector": {"app": "other"}}}, doomed)
        api.create(SERVICES, service("db", clusterIP="10.96.0.204"), doomed)
        delete_namespace(api, doomed)

    assert api.create(SERVICES, service("db", clusterIP="10.96.0.204"), namespace)["spec"]["clusterIP"] == "10.96.0.204"
    assert api.create(SERVICES, node_port_service("web", 30041), namespace)["spec"]["ports"][0]["nodePort"] == 30041


def test_a_full_range_is_a_server_error_and_writes_nothing(small_apiserver, api):
    small = small_apiserver.client()
    try:
        with scratch_namespace(api) as namespace:
            first = small.create(SERVICES, node_port_service("np-1", None), namespace)
            small.create(SERVICES, node_port_service("np-2", None), namespace)
            with pytest.raises(errors.ServerError, match="failed to allocate a nodePort: range is full"):
                small.create(SERVICES, node_port_service("np-3", None), namespace)
            assert_absent(api, "np-3", namespace)

            small.patch(SERVICES, "np-1", {"spec": {"type": "ClusterIP"}}, namespace)
            third = small.create(SERVICES, node_port_service("np-3", None), namespace)
            assert third["spec"]["ports"][0]["nodePort"] == first["spec"]["ports"][0]["nodePort"]

            for index in range(2):  # 10.112.0.2-6: three taken above, two more; .1 is the kubernetes Service's
                small.create(SERVICES, service(f"ip-{index}"), namespace)
            with pytest.raises(errors.ServerError, match="failed to allocate a serviceIP: range is full"):
                small.create(SERVICES, service("ip-full"), namespace)
            ips = {item["spec"]["clusterIP"] for item in small.list(SERVICES, namespace)["items"]}
            assert ips == {f"10.112.0.{host}" for host in range(2, 7)}

            small.delete(SERVICES, "ip-0", namespace)
            assert small.create(SERVICES, service("ip-full"), namespace)["spec"]["clusterIP"] in ips
    finally:
        small.close()


def test_the_kubernetes_service_and_endpoints_are_kept_in_place(api, apiserver_factory):
    before = api.get(SERVICES, "kubernetes", "default")

    started = apiserver_factory(extra_args=["--advertise-address", "127.0.0.1"])

    service_now = api.get(SERVICES, "kubernetes", "default")
    assert service_now["metadata"]["uid"] == before["metadata"]["uid"]
    spec = service_now["spec"]
    assert spec["clusterIP"] == "10.96.0.1" and spec["type"] == "ClusterIP" and "selector" not in spec
    assert spec["ports"] == [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": started.port}]
    endpoints = api.get(ENDPOINTS, "kubernetes", "default")
    assert endpoints["subsets"] == [{"addresses": [{"ip": "127.0.0.1"}],
                                     "ports": [{"name": "https", "port": started.port, "protocol": "TCP"}]}]


def test_the_default_advertise_address_is_the_default_routes(api, apiserver_factory):
    route = subprocess.run(["ip", "-4", "route", "get", "192.0.2.1"], capture_output=True, text=True, check=False)
    words = route.stdout.split()
    expected = words[words.index("src") + 1] if route.returncode == 0 and "src" in words else "127.0.0.1"

    started = apiserver_factory()

    endpoints = api.get(ENDPOINTS, "kubernetes", "default")
    assert endpoints["subsets"][0]["addresses"] == [{"ip": expected}]
    assert endpoints["subsets"][0]["ports"][0]["port"] == started.port


@pytest.mark.parametrize("version", sorted(upstream_kubectls()) or ["none"])
def test_upstream_kubectl_shows_cluster_ip_and_ports(version, api, apiserver, namespace, tmp_path):
    kubectls = upstream_kubectls()
    if version not in kubectls:
        pytest.fail("no upstream kubectl found: run scripts/test.sh, which installs one into .tools/kubectl")
    # An allocated port: each kubectl version's namespace keeps its Service until a namespace controller runs.
    created = api.create(SERVICES, node_port_service("web", None), namespace)
    node_port = created["spec"]["ports"][0]["nodePort"]

    def kubectl(*args):
        result = subprocess.run([str(kubectls[version]), "--kubeconfig", str(apiserver.kubeconfig), "--cache-dir",
                                 str(tmp_path / "cache"), *args], capture_output=True, text=True, timeout=60,
                                check=False, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
        assert result.returncode == 0, result.stderr
        return [line.split() for line in result.stdout.splitlines()]

    header, row = kubectl("get", "svc", "-n", namespace, "-o", "wide")
    assert header == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]
    assert row[:5] == ["web", "NodePort", created["spec"]["clusterIP"], "<none>", f"80:{node_port}/TCP"]
    assert row[6] == "app=web"
    header, row = kubectl("get", "svc", "kubernetes", "-n", "default")
    assert header[:5] == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)"]
    assert row[:5] == ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    endpoints = api.get(ENDPOINTS, "kubernetes", "default")["subsets"][0]
    header, row = kubectl("get", "endpoints", "kubernetes", "-n", "default")
    assert header == ["NAME", "ENDPOINTS", "AGE"]
    assert row[:2] == ["kubernetes", f"{endpoints['addresses'][0]['ip']}:{endpoints['ports'][0]['port']}"]
