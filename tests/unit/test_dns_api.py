"""The DNS kind in the apiserver and the CLI without a server: field checks, Service references, table, routes."""

from datetime import UTC, datetime, timedelta

import pytest

from cli.printers import TableLayout
from cli.verbs.describe import describe_text, route_lines
from daemons.api import tables
from daemons.api.errors import Invalid
from daemons.api.resources import require, resolve
from daemons.apiserver.dns import new_routes, route_causes
from daemons.apiserver.validation import validate

pytestmark = pytest.mark.unit

DNS = require("minik8s.io/v1", "DNS")
NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def dns(*paths: tuple[str, str, int], host: str = "shop.example.com") -> dict:
    return {"apiVersion": "minik8s.io/v1", "kind": "DNS",
            "metadata": {"name": "shop", "namespace": "default",
                         "creationTimestamp": (NOW - timedelta(seconds=90)).strftime("%Y-%m-%dT%H:%M:%SZ")},
            "spec": {"host": host, "paths": [{"path": path, "serviceName": service, "servicePort": port}
                                             for path, service, port in paths]}}


def service(name: str, *ports: int, cluster_ip: str = "10.96.0.10") -> dict:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterIP": cluster_ip, "ports": [{"name": f"p{port}", "port": port} for port in ports]}}


def causes(obj: dict) -> dict[str, str]:
    with pytest.raises(Invalid) as raised:
        validate(DNS, obj)
    return {cause["field"]: cause["message"] for cause in raised.value.causes}


# --- fields ----------------------------------------------------------------------------------------

def test_a_valid_object_passes_as_it_is():
    obj, unknown = validate(DNS, dns(("/cart", "cart", 80), ("/", "web", 8080)))
    assert obj["spec"]["paths"][1] == {"path": "/", "serviceName": "web", "servicePort": 8080}
    assert unknown == []


def test_each_bad_field_is_named():
    found = causes(dns(("cart", "Cart", 0), ("/a b", "pay", 80), host="Shop_.example"))
    assert set(found) == {"spec.host", "spec.paths[0].path", "spec.paths[0].serviceName",
                          "spec.paths[0].servicePort", "spec.paths[1].path"}
    assert "RFC 1123 subdomain" in found["spec.host"]
    assert "absolute URL path" in found["spec.paths[0].path"]


def test_a_repeated_prefix_names_the_later_path():
    found = causes(dns(("/cart", "cart", 80), ("/pay", "pay", 80), ("/cart/", "cart", 81)))
    assert found == {"spec.paths[2].path": 'Duplicate value: "/cart/": the same prefix as paths[0].path'}


def test_missing_host_and_empty_paths_are_refused():
    obj = dns()
    del obj["spec"]["host"]
    found = causes(obj)
    assert found["spec.host"] == "Required value"
    assert "at least 1 item" in found["spec.paths"]


# --- Service references ---------------------------------------------------------------------------

def test_a_missing_service_is_named_with_its_namespace():
    found = route_causes(dns(("/cart", "cart", 80), ("/pay", "pay", 80)), None, {"pay": service("pay", 80)})
    assert found == [{"reason": "FieldValueNotFound", "field": "spec.paths[0].serviceName",
                      "message": 'Not found: "cart": no Service cart in namespace default'}]


def test_a_port_the_service_lacks_is_named_with_the_ports_it_has():
    found = route_causes(dns(("/pay", "pay", 8080)), None, {"pay": service("pay", 80, 443)})
    assert [(cause["field"], cause["message"]) for cause in found] == [
        ("spec.paths[0].servicePort", "Not found: 8080: Service pay in namespace default has no port 8080 "
                                      "(ports: 80, 443)")]


def test_references_the_stored_object_held_are_not_checked_again():
    stored = dns(("/cart", "cart", 80))
    relabelled = dns(("/cart", "cart", 80), ("/pay", "pay", 80))
    assert new_routes(relabelled, stored) == [(1, "pay", 80)]
    assert route_causes(relabelled, stored, {"pay": service("pay", 80)}) == []
    moved = dns(("/cart", "cart", 81))
    assert [cause["field"] for cause in route_causes(moved, stored, {"cart": service("cart", 80)})] == [
        "spec.paths[0].servicePort"]


# --- table -----------------------------------------------------------------------------------------

def test_table_shows_host_and_paths_and_wide_adds_services():
    table = tables.table(resolve("dns"), [dns(("/cart", "cart", 80), ("/pay", "pay", 8080))], "5", now=NOW)
    layout = TableLayout(table["columnDefinitions"])
    wide = TableLayout(table["columnDefinitions"], wide=True)
    assert layout.header().split("\t") == ["NAME", "HOST", "PATHS", "AGE"]
    assert layout.row(table["rows"][0]).split("\t") == ["shop", "shop.example.com", "/cart,/pay", "90s"]
    assert wide.header().split("\t") == ["NAME", "HOST", "PATHS", "AGE", "SERVICES"]
    assert wide.row(table["rows"][0]).split("\t")[-1] == "cart:80,pay:8080"


# --- describe --------------------------------------------------------------------------------------

def test_routes_show_cluster_ip_and_ready_endpoints_or_what_is_missing():
    endpoints = {"subsets": [
        {"addresses": [{"ip": "10.244.0.5"}, {"ip": "10.244.0.6"}], "notReadyAddresses": [{"ip": "10.244.0.7"}],
         "ports": [{"name": "p80", "port": 8080}]}]}
    obj = dns(("/cart", "cart", 80), ("/pay", "pay", 80), ("/old", "cart", 81))
    lines = route_lines(obj, {"cart": service("cart", 80)}, {"cart": endpoints})
    assert lines == [
        "Routes:",
        "  http://shop.example.com/cart -> cart:80 (10.96.0.10:80, 2 ready endpoints)",
        "  http://shop.example.com/pay -> pay:80 (service not found)",
        "  http://shop.example.com/old -> cart:81 (service has no port 81)",
    ]
    assert route_lines(dns(("/", "web", 80)), {"web": service("web", 80)}, {})[1].endswith(
        "(10.96.0.10:80, 0 ready endpoints)")


def test_describe_puts_routes_before_events():
    lines = route_lines(dns(("/cart", "cart", 80)), {}, {})
    text = describe_text(dns(("/cart", "cart", 80)), True, [], NOW, lines).splitlines()
    assert text[-3:] == ["Routes:", "  http://shop.example.com/cart -> cart:80 (service not found)",
                         "Events:  <none>"]
    assert "  Host:  shop.example.com" in text
