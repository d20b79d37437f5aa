"""The DNS kind through a real apiserver over etcd: our kubectl, upstream kubectl and the API, as a user drives them.

A DNS path must name a Service of its namespace and one of that Service's ports; anything else is a 422 naming
the field, and nothing is stored.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from daemons.api import errors
from daemons.api.resources import require
from tests.conftest import Kubectl, parse_table
from tests.integration.test_upstream_kubectl import _read_lines, _wait_for_line

pytestmark = pytest.mark.integration

DNS = require("minik8s.io/v1", "DNS")
SERVICES = require("v1", "Service")
ENDPOINTS = require("v1", "Endpoints")
OUR_KUBECTL = Path(sys.executable).with_name("kubectl")


def service(name: str, *ports: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": f"p{port}", "port": port} for port in ports]}}


def dns(name: str, host: str, *paths: tuple[str, str, int]) -> dict:
    return {"apiVersion": "minik8s.io/v1", "kind": "DNS", "metadata": {"name": name},
            "spec": {"host": host, "paths": [{"path": path, "serviceName": svc, "servicePort": port}
                                             for path, svc, port in paths]}}


SHOP = dns("shop", "shop.example.com", ("/cart", "cart", 80), ("/pay", "pay", 80))


def causes(call) -> dict[str, str]:
    """The causes of the 422 that ``call`` must raise, by field."""
    with pytest.raises(errors.Invalid) as raised:
        call()
    return {cause["field"]: cause["message"] for cause in raised.value.causes}


def assert_absent(api, name: str, namespace: str) -> None:
    with pytest.raises(errors.NotFound):
        api.get(DNS, name, namespace)


@pytest.fixture
def shop_services(api, namespace) -> None:
    for name in ("cart", "pay"):
        api.create(SERVICES, service(name, 80), namespace)


@pytest.fixture
def ours(apiserver, namespace):
    """Our kubectl with the test's kubeconfig and namespace; returns the finished process."""
    assert OUR_KUBECTL.exists(), f"{OUR_KUBECTL} is missing: install the project (pip install -e .)"

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [str(OUR_KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), *args, "-n", namespace]
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60, check=False)

    return run


@pytest.fixture
def upstream(kubectl_binary, apiserver, namespace) -> Kubectl:
    binary, cache_dir = kubectl_binary
    return Kubectl(binary, apiserver.kubeconfig, namespace, cache_dir)


def assert_watch_shows_new_dns(process: subprocess.Popen[str], api, namespace: str) -> None:
    """``get dns -w`` prints the table with SHOP, then a row for a DNS object created while it watches."""
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        _wait_for_line(lines, "shop", seen)
        assert seen[0].split() == ["NAME", "HOST", "PATHS", "AGE"]
        api.create(DNS, dns("pay", "pay.example.com", ("/", "pay", 80)), namespace)
        assert _wait_for_line(lines, "pay", seen).split()[1:3] == ["pay.example.com", "/"]
    finally:
        process.kill()
        process.wait(10)
        assert process.stdout is not None
        process.stdout.close()
        reader.join(10)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


# --- the API ---------------------------------------------------------------------------------------

def test_a_path_to_a_missing_service_or_port_is_refused_and_nothing_stored(api, namespace):
    api.create(SERVICES, service("pay", 80, 443), namespace)
    found = causes(lambda: api.create(DNS, dns("shop", "shop.example.com", ("/cart", "cart", 80),
                                              ("/pay", "pay", 8080)), namespace))
    assert found == {
        "spec.paths[0].serviceName": f'Not found: "cart": no Service cart in namespace {namespace}',
        "spec.paths[1].servicePort": f"Not found: 8080: Service pay in namespace {namespace} has no port 8080 "
                                     "(ports: 80, 443)",
    }
    assert_absent(api, "shop", namespace)


def test_a_service_of_another_namespace_does_not_count(api, namespace, shop_services):
    other = f"{namespace}-x"
    api.create(require("v1", "Namespace"), {"metadata": {"name": other}})
    try:
        found = causes(lambda: api.create(DNS, SHOP, other))
        assert set(found) == {"spec.paths[0].serviceName", "spec.paths[1].serviceName"}
        assert_absent(api, "shop", other)
    finally:
        api.delete(require("v1", "Namespace"), other)


def test_dry_run_checks_the_services_too_and_stores_nothing(api, namespace, shop_services):
    missing = dns("ghost", "ghost.example.com", ("/", "ghost", 80))
    found = causes(lambda: api.create(DNS, missing, namespace, params={"dryRun": "All"}))
    assert list(found) == ["spec.paths[0].serviceName"]
    answered = api.create(DNS, SHOP, namespace, params={"dryRun": "All"})
    assert answered["spec"]["host"] == "shop.example.com"
    assert_absent(api, "shop", namespace)


def test_an_update_to_a_missing_service_is_refused_and_the_old_object_stays(api, namespace, shop_services):
    stored = api.create(DNS, SHOP, namespace)
    changed = {**stored, "spec": {**stored["spec"], "paths": [
        *stored["spec"]["paths"], {"path": "/ship", "serviceName": "ship", "servicePort": 80}]}}

    assert list(causes(lambda: api.replace(DNS, changed, namespace))) == ["spec.paths[2].serviceName"]
    merge = {"spec": {"paths": changed["spec"]["paths"]}}
    assert list(causes(lambda: api.patch(DNS, "shop", merge, namespace))) == ["spec.paths[2].serviceName"]
    json_patch = [{"op": "replace", "path": "/spec/paths/0/servicePort", "value": 81}]
    assert list(causes(lambda: api.patch(DNS, "shop", json_patch, namespace, patch_type="json"))) == [
        "spec.paths[0].servicePort"]
    applied = {**SHOP, "spec": {**SHOP["spec"], "paths": [{"path": "/", "serviceName": "ship", "servicePort": 80}]}}
    assert list(causes(lambda: api.patch(DNS, "shop", applied, namespace, patch_type="apply",
                                         field_manager="test"))) == ["spec.paths[0].serviceName"]

    kept = api.get(DNS, "shop", namespace)
    assert kept["spec"] == SHOP["spec"]
    assert kept["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


def test_a_dns_whose_service_went_away_can_still_be_labelled_and_deleted(api, namespace, shop_services):
    api.create(DNS, SHOP, namespace)
    api.delete(SERVICES, "cart", namespace)

    labelled = api.patch(DNS, "shop", {"metadata": {"labels": {"team": "web"}}}, namespace)
    assert labelled["metadata"]["labels"] == {"team": "web"}
    api.delete(DNS, "shop", namespace)
    assert_absent(api, "shop", namespace)


def test_invalid_hosts_and_paths_name_their_fields(api, namespace, shop_services):
    bad_host = dns("a", "Shop_Example", ("/cart", "cart", 80))
    assert list(causes(lambda: api.create(DNS, bad_host, namespace))) == ["spec.host"]
    relative = dns("b", "shop.example.com", ("cart", "cart", 80), ("/p ay", "pay", 80))
    assert set(causes(lambda: api.create(DNS, relative, namespace))) == {"spec.paths[0].path", "spec.paths[1].path"}
    repeated = dns("c", "shop.example.com", ("/cart", "cart", 80), ("/cart/", "pay", 80))
    assert list(causes(lambda: api.create(DNS, repeated, namespace))) == ["spec.paths[1].path"]
    no_paths = dns("d", "shop.example.com")
    assert list(causes(lambda: api.create(DNS, no_paths, namespace))) == ["spec.paths"]
    for name in "abcd":
        assert_absent(api, name, namespace)


# --- our kubectl -----------------------------------------------------------------------------------

def test_our_kubectl_applies_lists_and_describes_dns(ours, api, namespace, shop_services):
    assert ok(ours("apply", "-f", "-", stdin=yaml.safe_dump(SHOP))).strip() == "dns.minik8s.io/shop created"

    columns, rows = parse_table(ok(ours("get", "dns")))
    assert columns == ["NAME", "HOST", "PATHS", "AGE"]
    assert [(row["NAME"], row["HOST"], row["PATHS"]) for row in rows] == [("shop", "shop.example.com", "/cart,/pay")]
    columns, rows = parse_table(ok(ours("get", "dns", "shop", "-o", "wide")))
    assert columns[-1] == "SERVICES"
    assert rows[0]["SERVICES"] == "cart:80,pay:80"

    api.delete(SERVICES, "pay", namespace)
    cart_ip = api.get(SERVICES, "cart", namespace)["spec"]["clusterIP"]
    api.create(ENDPOINTS, {"metadata": {"name": "cart"}, "subsets": [
        {"addresses": [{"ip": "10.244.0.5"}, {"ip": "10.244.0.6"}], "ports": [{"name": "p80", "port": 8080}]}]},
        namespace)
    text = ok(ours("describe", "dns", "shop"))
    assert "Routes:\n" in text
    assert f"  http://shop.example.com/cart -> cart:80 ({cart_ip}:80, 2 ready endpoints)\n" in text
    assert "  http://shop.example.com/pay -> pay:80 (service not found)\n" in text


def test_our_kubectl_apply_of_a_missing_service_fails_naming_the_field(ours, api, namespace, shop_services):
    ok(ours("apply", "-f", "-", stdin=yaml.safe_dump(SHOP)))
    moved = dns("shop", "shop.example.com", ("/cart", "carts", 80))
    refused = ours("apply", "-f", "-", stdin=yaml.safe_dump(moved))
    assert refused.returncode == 1
    assert "spec.paths[0].serviceName" in refused.stderr
    assert f"no Service carts in namespace {namespace}" in refused.stderr
    assert api.get(DNS, "shop", namespace)["spec"] == SHOP["spec"]

    refused = ours("apply", "-f", "-", stdin=yaml.safe_dump(dns("new", "new.example.com", ("/", "cart", 81))))
    assert refused.returncode == 1
    assert "spec.paths[0].servicePort" in refused.stderr
    assert_absent(api, "new", namespace)


def test_our_kubectl_watches_dns(apiserver, api, namespace, shop_services):
    api.create(DNS, SHOP, namespace)
    argv = [str(OUR_KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "get", "dns", "-w", "-n", namespace]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               stdin=subprocess.DEVNULL)
    assert_watch_shows_new_dns(process, api, namespace)


def test_our_kubectl_lists_dns_among_api_resources(ours):
    lines = [line.split() for line in ok(ours("api-resources")).splitlines()]
    assert ["dns", "minik8s.io/v1", "true", "DNS"] in lines


# --- upstream kubectl ------------------------------------------------------------------------------

def test_upstream_kubectl_applies_and_lists_dns(upstream, api, namespace, shop_services):
    assert upstream("apply", "-f", "-", stdin=yaml.safe_dump(SHOP)).strip() == "dns.minik8s.io/shop created"

    columns, rows = parse_table(upstream("get", "dns"))
    assert columns == ["NAME", "HOST", "PATHS", "AGE"]
    assert [(row["NAME"], row["HOST"], row["PATHS"]) for row in rows] == [("shop", "shop.example.com", "/cart,/pay")]
    _columns, rows = parse_table(upstream("get", "dns.minik8s.io", "shop", "-o", "wide"))
    assert rows[0]["SERVICES"] == "cart:80,pay:80"

    _columns, rows = parse_table(upstream("api-resources", "--api-group", "minik8s.io"))
    assert {"NAME": "dns", "SHORTNAMES": "", "APIVERSION": "minik8s.io/v1", "NAMESPACED": "true",
            "KIND": "DNS"} in rows


def test_upstream_kubectl_apply_of_a_missing_service_fails_naming_the_field(upstream, api, namespace,
                                                                           shop_services):
    refused = upstream.run("apply", "-f", "-", stdin=yaml.safe_dump(dns("ghost", "ghost.example.com",
                                                                        ("/", "ghost", 80))))
    assert refused.returncode == 1
    assert 'The DNS "ghost" is invalid' in refused.stderr
    assert f'spec.paths[0].serviceName: Not found: "ghost": no Service ghost in namespace {namespace}' \
        in refused.stderr
    assert_absent(api, "ghost", namespace)


def test_upstream_kubectl_watches_dns(upstream, api, namespace, shop_services):
    api.create(DNS, SHOP, namespace)
    assert_watch_shows_new_dns(upstream.popen("get", "dns", "-w"), api, namespace)
