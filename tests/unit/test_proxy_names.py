"""The cluster view the proxy programs nginx and dnsmasq from: virtual hosts, names, the hosts file, nginx's text."""

from __future__ import annotations

import pytest

from daemons.proxy.names import DroppedPath, NameRecord, cluster_view, hosts_file, name_records, virtual_hosts
from daemons.proxy.nginx import render_nginx
from daemons.proxy.proxier import describe_host_changes

pytestmark = pytest.mark.unit


def service(name: str, cluster_ip: str, *ports: int, namespace: str = "shop") -> dict:
    return {"metadata": {"namespace": namespace, "name": name},
            "spec": {"clusterIP": cluster_ip, "ports": [{"port": port, "protocol": "TCP"} for port in ports]}}


def dns(name: str, host: str, *paths: tuple[str, str, int], namespace: str = "shop",
        created: str = "2026-01-01T00:00:00Z") -> dict:
    return {"metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
            "spec": {"host": host, "paths": [{"path": path, "serviceName": svc, "servicePort": port}
                                             for path, svc, port in paths]}}


SERVICES = [service("cart", "10.96.0.5", 80), service("pay", "10.96.0.6", 8080), service("web", "10.96.0.7", 80)]


def test_routes_point_at_the_services_cluster_ip_and_port_longest_prefix_first():
    hosts, dropped = virtual_hosts([dns("web", "shop.example.com", ("/", "web", 80), ("/cart", "cart", 80),
                                        ("/cart/items/", "cart", 80), ("/pay", "pay", 8080))], SERVICES)
    assert dropped == ()
    (vhost,) = hosts
    assert vhost.host == "shop.example.com"
    assert [(route.path, route.prefix, route.target) for route in vhost.routes] == [
        ("/cart/items/", "/cart/items", "10.96.0.5:80"),
        ("/cart", "/cart", "10.96.0.5:80"),
        ("/pay", "/pay", "10.96.0.6:8080"),
        ("/", "/", "10.96.0.7:80"),
    ]
    assert vhost.routes[0].service_key == "shop/cart"
    assert vhost.routes[0].owner == "shop/web"
    assert vhost.has_root


def test_a_missing_service_port_or_cluster_ip_leaves_the_route_without_target():
    headless = service("db", "None", 5432)
    hosts, _ = virtual_hosts([dns("web", "shop.example.com", ("/gone", "gone", 80), ("/pay", "pay", 9999),
                                  ("/db", "db", 5432), ("/cart", "cart", 80))], [*SERVICES, headless])
    targets = {route.path: route.target for route in hosts[0].routes}
    assert targets == {"/gone": None, "/pay": None, "/db": None, "/cart": "10.96.0.5:80"}
    assert not hosts[0].has_root


def test_a_service_in_another_namespace_is_not_a_target():
    hosts, _ = virtual_hosts([dns("web", "shop.example.com", ("/cart", "cart", 80), namespace="other")], SERVICES)
    assert hosts[0].routes[0].target is None


def test_objects_naming_one_host_merge_and_the_older_keeps_a_contested_prefix():
    newer = dns("b-new", "shop.example.com", ("/cart/", "pay", 8080), ("/pay", "pay", 8080),
                created="2026-02-01T00:00:00Z")
    older = dns("z-old", "Shop.Example.com", ("/cart", "cart", 80), created="2026-01-01T00:00:00Z")
    hosts, dropped = virtual_hosts([newer, older], SERVICES)
    (vhost,) = hosts
    assert [(route.path, route.owner) for route in vhost.routes] == [("/cart", "shop/z-old"), ("/pay", "shop/b-new")]
    assert dropped == (DroppedPath("shop.example.com", "/cart/", "shop/b-new", "shop/z-old"),)
    assert "shop/b-new" in str(dropped[0]) and "/cart/" in str(dropped[0])


def test_same_age_conflicts_go_to_the_first_namespace_and_name():
    first = dns("a", "shop.example.com", ("/cart", "cart", 80), namespace="shop")
    second = dns("a", "shop.example.com", ("/cart", "cart", 80), namespace="zoo")
    hosts, dropped = virtual_hosts([second, first], SERVICES)
    assert hosts[0].routes[0].owner == "shop/a"
    assert [item.owner for item in dropped] == ["zoo/a"]


def test_hosts_are_ordered_by_name():
    hosts, _ = virtual_hosts([dns("b", "b.example.com", ("/", "web", 80)), dns("a", "a.example.com", ("/", "web", 80))],
                             SERVICES)
    assert [vhost.host for vhost in hosts] == ["a.example.com", "b.example.com"]


def test_services_are_named_by_cluster_ip_and_headless_ones_by_ready_endpoints():
    headless = service("db", "None", 5432)
    pending = {"metadata": {"namespace": "shop", "name": "new"}, "spec": {"ports": [{"port": 80}]}}
    endpoints = [{"metadata": {"namespace": "shop", "name": "db"},
                  "subsets": [{"addresses": [{"ip": "10.244.1.9"}, {"ip": "10.244.1.10"}],
                               "notReadyAddresses": [{"ip": "10.244.1.11"}], "ports": [{"port": 5432}]}]}]
    records = name_records([service("cart", "10.96.0.5", 80), headless, pending], endpoints, "cluster.local")
    assert records == (
        NameRecord("cart.shop.svc.cluster.local", "10.96.0.5"), NameRecord("cart.shop", "10.96.0.5"),
        NameRecord("db.shop.svc.cluster.local", "10.244.1.9"), NameRecord("db.shop", "10.244.1.9"),
        NameRecord("db.shop.svc.cluster.local", "10.244.1.10"), NameRecord("db.shop", "10.244.1.10"),
    )


def test_the_view_names_dns_hosts_by_the_node_address_and_keeps_the_service_ports():
    view = cluster_view(SERVICES, [], [dns("web", "shop.example.com", ("/cart", "cart", 80))],
                        domain="corp.local", node_ip="192.0.2.10")
    assert NameRecord("shop.example.com", "192.0.2.10") in view.records
    assert NameRecord("cart.shop.svc.corp.local", "10.96.0.5") in view.records
    assert [port.key for port in view.ports] == ["shop/cart", "shop/pay", "shop/web"]


def test_hosts_file_lists_each_address_once_with_its_names():
    text = hosts_file([NameRecord("cart.shop.svc.cluster.local", "10.96.0.5"), NameRecord("cart.shop", "10.96.0.5"),
                       NameRecord("shop.example.com", "192.0.2.10"), NameRecord("a.example.com", "192.0.2.10")])
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["10.96.0.5 cart.shop.svc.cluster.local cart.shop", "192.0.2.10 shop.example.com a.example.com"]
    assert text.endswith("\n")


def test_nginx_configuration_has_a_404_default_server_and_prefix_locations_per_route():
    hosts, _ = virtual_hosts([dns("web", "shop.example.com", ("/cart/", "cart", 80), ("/gone", "gone", 80))],
                             SERVICES)
    text = render_nginx(hosts, listen="80", pid_file="/run/minik8s/nginx.pid", snippets_dir="/etc/minik8s/nginx.d/")
    assert "pid /run/minik8s/nginx.pid;" in text
    assert "\ndaemon " not in text  # the process manager runs nginx in the foreground
    assert "include /etc/minik8s/nginx.d/*.conf;" in text
    assert "listen 80 default_server;" in text
    server = text[text.index("server_name shop.example.com;"):]
    assert "location = /cart {\n            proxy_pass http://10.96.0.5:80;" in server
    assert "location /cart/ {\n            proxy_pass http://10.96.0.5:80;" in server
    assert "proxy_set_header Host $host;" in server
    assert "location = /gone {\n            return 503;" in server
    assert "location /gone/ {\n            return 503;" in server
    assert "location / {\n            return 404;" in server  # no route for "/": other paths are unknown


def test_nginx_root_route_is_one_location():
    hosts, _ = virtual_hosts([dns("web", "shop.example.com", ("/", "web", 80))], SERVICES)
    text = render_nginx(hosts, listen="127.0.0.1:18080", pid_file="/p", snippets_dir="/s")
    server = text[text.index("server_name shop.example.com;"):]
    assert server.count("location") == 1
    assert "location / {\n            proxy_pass http://10.96.0.7:80;" in server
    assert "listen 127.0.0.1:18080;" in text


def test_host_changes_are_described_once_per_host():
    before, _ = virtual_hosts([dns("web", "shop.example.com", ("/cart", "cart", 80)),
                               dns("old", "old.example.com", ("/", "web", 80))], SERVICES)
    after, _ = virtual_hosts([dns("web", "shop.example.com", ("/cart", "pay", 8080)),
                              dns("new", "new.example.com", ("/", "gone", 80))], SERVICES)
    assert describe_host_changes(before, after) == [
        "host old.example.com: removed",
        "host new.example.com: added, / -> shop/gone:80 (no target)",
        "host shop.example.com: changed, /cart -> shop/pay:8080 (10.96.0.6:8080)",
    ]
    assert describe_host_changes(after, after) == []
