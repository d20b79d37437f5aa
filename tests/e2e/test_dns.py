"""DNS objects on the installed cluster: host and path routing through every node's nginx, and Service names
through its dnsmasq, seen from the host and from pods."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest

from daemons.api.errors import NotFound
from daemons.api.resources import resolve
from tests.conftest import upstream_kubectls
from tests.e2e.conftest import OUR_KUBECTL, client_pod, fetch_from_pod, is_ready, run_kubectl, wait_for

PODS = resolve("pods")
SERVICES = resolve("services")
DEPLOYMENTS = resolve("deployments")
NODES = resolve("nodes")
DNS = resolve("dns")
NAMESPACES = resolve("namespaces")
EXAMPLE = Path(__file__).parents[2] / "examples" / "dns.yaml"
HOST = "shop.example.com"
# The proxy's snippets folder: nginx's configuration includes every *.conf there (roles/nginx).
NGINX_SNIPPETS_DIR = Path("/etc/minik8s/nginx.d")
PROXY_METRICS_URL = "http://127.0.0.1:10249/metrics"


def fetch(url: str, host: str | None = None) -> tuple[int, str] | None:
    """Status and body of a GET from this machine, through its resolver; None when it cannot connect."""
    try:
        answer = httpx.get(url, headers={"Host": host} if host else None, timeout=3)
    except httpx.HTTPError:
        return None
    return answer.status_code, answer.text.strip()


def rejected_configurations() -> float:
    """How many configurations the node's proxy rendered that failed ``nginx -t`` (its /metrics)."""
    exposition = httpx.get(PROXY_METRICS_URL, timeout=3).text
    return sum(float(line.split()[-1]) for line in exposition.splitlines()
               if line.startswith('minik8s_proxy_nginx_reloads_total{') and 'result="rejected"' in line)


def addresses(name: str) -> set[str]:
    """What this machine's resolver answers for ``name`` (empty when it does not resolve)."""
    try:
        return {entry[4][0] for entry in socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)}
    except socket.gaierror:
        return set()


def node_address(cluster) -> str:
    node = cluster.list(NODES)["items"][0]
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def cluster_ip(cluster, namespace: str, name: str) -> str:
    return cluster.get(SERVICES, name, namespace)["spec"]["clusterIP"]


def dns_object(name: str, host: str, paths: list[tuple[str, str]]) -> dict:
    return {"apiVersion": "minik8s.io/v1", "kind": "DNS", "metadata": {"name": name},
            "spec": {"host": host, "paths": [{"path": path, "serviceName": service, "servicePort": 80}
                                             for path, service in paths]}}


@pytest.fixture(scope="module")
def shop(cluster):
    """The example applied in a namespace of its own, its four pods ready, and a client pod; shared by the
    tests of this module, which leave the example's own DNS object as it is."""
    namespace = f"e2e-dns-{uuid.uuid4().hex[:8]}"
    cluster.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        run_kubectl("-n", namespace, "apply", "-f", str(EXAMPLE))
        cluster.create(PODS, client_pod(), namespace)
        for name in ("cart", "pay"):
            wait_for(lambda name=name: cluster.get(DEPLOYMENTS, name, namespace).get("status", {})
                     .get("readyReplicas") == 2, 180, what=f"2 ready {name} pods")
        wait_for(lambda: is_ready(cluster, namespace, "client"), 120, what="the client pod")
        yield namespace
    finally:
        with contextlib.suppress(NotFound):
            cluster.delete(NAMESPACES, namespace)


def test_the_example_routes_each_path_to_its_service_from_the_host_and_from_pods(cluster, shop):
    namespace, node = shop, node_address(cluster)
    assert wait_for(lambda: addresses(HOST), 10, what=f"{HOST} to resolve") == {node}
    answer = wait_for(lambda: fetch(f"http://{HOST}/cart/items"), 10, what=f"http://{HOST}/cart/items")
    status, body = answer
    app, pod, path = body.split()
    assert (status, app, path) == (200, "cart", "/cart/items") and pod.startswith("cart-"), answer
    assert fetch(f"http://{HOST}/pay")[1].split()[0::2] == ["pay", "/pay"]
    assert fetch(f"http://{HOST}/cartx")[0] == 404, "a path matches whole segments only"
    assert fetch(f"http://{node}/cart", host="nobody.example.com")[0] == 404, "an unknown host has no routes"

    # Service names, from the host and from a pod of the namespace (where the search path finds `cart`).
    cart_ip = cluster_ip(cluster, namespace, "cart")
    assert addresses(f"cart.{namespace}.svc.cluster.local") == {cart_ip}
    assert addresses(f"pay.{namespace}") == {cluster_ip(cluster, namespace, "pay")}
    lookup = run_kubectl("-n", namespace, "exec", "client", "--", "nslookup",
                         f"cart.{namespace}.svc.cluster.local").stdout
    assert cart_ip in lookup, lookup
    assert (fetch_from_pod(namespace, "http://cart/") or "").startswith("cart "), "`cart` through the search path"
    assert (fetch_from_pod(namespace, f"http://{HOST}/pay/now") or "").split()[0::2] == ["pay", "/pay/now"]

    # The table, from ours and from upstream kubectl.
    for binary in (OUR_KUBECTL, *map(str, upstream_kubectls().values())):
        table = run_kubectl("-n", namespace, "get", "dns", binary=binary).stdout.splitlines()
        assert table[0].split() == ["NAME", "HOST", "PATHS", "AGE"], (binary, table)
        assert table[1].split()[:3] == ["shop", HOST, "/cart,/pay"], (binary, table)


def test_editing_a_path_retargets_it_and_deleting_the_object_removes_route_and_name(cluster, shop):
    namespace, node = shop, node_address(cluster)
    host = f"edit-{namespace}.example.com"
    cluster.create(DNS, dns_object("edit", host, [("/cart", "cart")]), namespace)
    wait_for(lambda: (fetch(f"http://{host}/cart") or (0, ""))[1].startswith("cart "), 10, what="the cart route")

    started = time.monotonic()
    run_kubectl("-n", namespace, "patch", "dns", "edit", "--type", "json", "-p",
                '[{"op": "replace", "path": "/spec/paths/0/serviceName", "value": "pay"}]')
    wait_for(lambda: (fetch(f"http://{host}/cart") or (0, ""))[1].startswith("pay "), 10, interval=0.1,
             what="/cart to reach the pay service")
    print(f"retargeted in {time.monotonic() - started:.2f} s")

    started = time.monotonic()
    run_kubectl("-n", namespace, "delete", "dns", "edit")
    wait_for(lambda: (fetch(f"http://{node}/cart", host=host) or (0, ""))[0] == 404, 10, interval=0.1,
             what="the route to go")
    print(f"route removed in {time.monotonic() - started:.2f} s")
    wait_for(lambda: node not in addresses(host), 10, interval=0.1, what=f"{host} to stop resolving to the node")
    assert fetch(f"http://{HOST}/cart")[1].startswith("cart "), "another object's route changed"


def test_a_dns_object_naming_a_missing_service_is_refused(cluster, e2e_namespace):
    manifest = ("apiVersion: minik8s.io/v1\nkind: DNS\nmetadata: {name: nowhere}\nspec:\n  host: nowhere.example.com\n"
                "  paths: [{path: /, serviceName: missing, servicePort: 80}]\n")
    result = run_kubectl("-n", e2e_namespace, "apply", "-f", "-", stdin=manifest, check=False)
    assert result.returncode != 0
    assert "spec.paths[0].serviceName" in result.stderr + result.stdout, result
    with pytest.raises(NotFound):
        cluster.get(DNS, "nowhere", e2e_namespace)


def test_a_configuration_nginx_refuses_never_replaces_the_one_it_serves(cluster, shop):
    namespace, node = shop, node_address(cluster)
    host = f"later-{namespace}.example.com"
    wait_for(lambda: (fetch(f"http://{HOST}/cart") or (0, ""))[1].startswith("cart "), 10, what="the cart route")
    broken = NGINX_SNIPPETS_DIR / f"zz-{namespace}.conf"
    rejected = rejected_configurations()
    broken.write_text("this_is_not_an_nginx_directive on;\n")
    try:
        cluster.create(DNS, dns_object("later", host, [("/", "pay")]), namespace)
        # dnsmasq learns the name in the same sync whose nginx configuration fails its test.
        wait_for(lambda: addresses(host) == {node}, 10, what=f"{host} to resolve")
        wait_for(lambda: rejected_configurations() > rejected, 10, what="the proxy to reject the configuration")
        assert fetch(f"http://{host}/")[0] == 404, "the refused configuration reached nginx"
        assert fetch(f"http://{HOST}/cart")[1].startswith("cart "), "the served routes stopped working"
    finally:
        broken.unlink()
    # The proxy retries with back-off (at most 30 s apart) and succeeds once the snippet is gone.
    wait_for(lambda: (fetch(f"http://{host}/") or (0, ""))[1].startswith("pay "), 60, what=f"the route of {host}")
