"""What Docker is asked to create for a pod: names, labels, volumes, environment, security and limits."""

import pytest

from daemons.kubelet.spec import (
    LABEL_BACKOFF,
    LABEL_CONTAINER_KIND,
    LABEL_HASH,
    LABEL_NODE,
    LABEL_POD_UID,
    LABEL_RESTART_COUNT,
    ConfigError,
    binds,
    container_create_args,
    container_hash,
    container_name,
    environment,
    pause_create_args,
    pause_name,
    security,
    service_environment,
    volume_sources,
)

UID = "0b5f5a4e-1111-2222-3333-444455556666"


def pod(**spec):
    return {"metadata": {"name": "web", "namespace": "shop", "uid": UID, "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox"}], **spec}}


def test_names_follow_the_dockershim_layout():
    assert pause_name(pod()) == "k8s_POD_web_shop_0b5f5a4e"
    assert container_name(pod(), {"name": "main"}, 3) == "k8s_main_web_shop_0b5f5a4e_3"


def test_the_hash_is_stable_and_follows_the_spec():
    spec = {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
    assert container_hash(spec) == container_hash(dict(reversed(list(spec.items()))))
    assert container_hash(spec) != container_hash({**spec, "image": "busybox:1.36"})


def test_an_app_container_joins_the_pause_containers_namespaces():
    container = {"name": "main", "image": "busybox", "command": ["sh", "-c"], "args": ["echo hi"],
                 "workingDir": "/srv", "resources": {"limits": {"cpu": "250m", "memory": "64Mi"},
                                                     "requests": {"cpu": "100m"}}}
    args = container_create_args(pod(), container, "pause123", {}, node_name="n1", restart_count=2, backoff=1)
    assert args["name"] == "k8s_main_web_shop_0b5f5a4e_2"
    assert args["network_mode"] == args["ipc_mode"] == "container:pause123"
    assert (args["entrypoint"], args["command"], args["working_dir"]) == (["sh", "-c"], ["echo hi"], "/srv")
    assert args["nano_cpus"] == 250_000_000
    assert args["mem_limit"] == args["memswap_limit"] == 64 * 2**20
    labels = args["labels"]
    assert labels[LABEL_POD_UID] == UID and labels[LABEL_NODE] == "n1" and labels[LABEL_CONTAINER_KIND] == "app"
    assert (labels[LABEL_RESTART_COUNT], labels[LABEL_BACKOFF]) == ("2", "1")
    assert labels[LABEL_HASH] == container_hash(container)
    assert "ports" not in args and "user" not in args


def test_without_command_the_images_entrypoint_stays():
    args = container_create_args(pod(), {"name": "main", "image": "busybox"}, "p", {}, node_name="n1")
    assert "entrypoint" not in args and "command" not in args


def test_environment_resolves_field_refs():
    container = {"name": "main", "env": [
        {"name": "PLAIN", "value": "x"},
        {"name": "EMPTY"},
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
    ]}
    assert environment(pod(), container, "10.1.0.5", "192.0.2.2") == {
        "PLAIN": "x", "EMPTY": "", "NAME": "web", "NS": "shop", "IP": "10.1.0.5", "NODE": "n1", "APP": "web"}


def test_unsupported_env_sources_are_config_errors():
    with pytest.raises(ConfigError, match="fieldRef"):
        environment(pod(), {"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]}, "", "")


def test_the_containers_security_context_wins_over_the_pods():
    context = {"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                                   "supplementalGroups": [4000, 2000]}}
    assert security(pod(**context), {"securityContext": {"runAsUser": 2000}}) == ("2000:3000", ["2000", "4000"])
    assert security(pod(), {"securityContext": {"runAsUser": 7}}) == ("7", [])
    assert security(pod(), {"securityContext": {"runAsGroup": 9}}) == ("0:9", [])
    assert security(pod(), {}) == (None, [])


def test_volumes_live_under_the_root_dir_or_where_hostpath_says():
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "logs", "hostPath": {"path": "/var/log/x",
                                                                                   "type": "DirectoryOrCreate"}},
               {"name": "sock", "hostPath": {"path": "/run/x.sock"}},
               {"name": "conf", "hostPath": {"path": "/etc/x.conf", "type": "FileOrCreate"}}]
    sources = volume_sources(pod(volumes=volumes), "/var/lib/k")
    assert sources["scratch"].host_path == f"/var/lib/k/pods/{UID}/volumes/scratch"
    assert sources["scratch"].empty_dir and sources["scratch"].create == "directory"
    assert (sources["logs"].host_path, sources["logs"].create) == ("/var/log/x", "directory")
    assert sources["sock"].create == "none" and sources["conf"].create == "file"


def test_unsupported_volume_types_are_config_errors():
    with pytest.raises(ConfigError, match="nfs"):
        volume_sources(pod(volumes=[{"name": "c", "nfs": {"server": "x"}}]), "/r")


def test_mounts_become_binds_with_read_only_and_sub_path():
    container = {"volumeMounts": [{"name": "data", "mountPath": "/data"},
                                  {"name": "data", "mountPath": "/ro", "readOnly": True, "subPath": "sub"}]}
    assert binds(container, {"data": "/host/d"}) == ["/host/d:/data:rw", "/host/d/sub:/ro:ro"]
    with pytest.raises(ConfigError, match="missing"):
        binds({"volumeMounts": [{"name": "missing", "mountPath": "/x"}]}, {})


def test_the_pause_container_owns_network_ipc_and_dns():
    args = pause_create_args(pod(), "pause:latest", "n1", ["10.96.0.10"], "cluster.local")
    assert (args["image"], args["name"], args["ipc_mode"], args["hostname"]) == (
        "pause:latest", "k8s_POD_web_shop_0b5f5a4e", "shareable", "web")
    assert args["labels"][LABEL_CONTAINER_KIND] == "pause"
    assert args["dns"] == ["10.96.0.10"]
    assert args["dns_search"] == ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    assert "dns" not in pause_create_args(pod(), "pause", "n1", [], None)
    assert "dns" not in pause_create_args(pod(dnsPolicy="Default"), "pause", "n1", ["10.96.0.10"], None)
    assert pause_create_args(pod(hostNetwork=True), "pause", "n1", [], None)["network_mode"] == "host"
    assert pause_create_args(pod(hostname="web-0"), "pause", "n1", [], None)["hostname"] == "web-0"


def _service(namespace: str, name: str, cluster_ip: str, *ports: dict) -> dict:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"clusterIP": cluster_ip, "ports": list(ports)}}


def test_service_environment_names_each_service_of_the_namespace_and_the_master_service():
    pod = {"metadata": {"namespace": "shop", "name": "p"}, "spec": {}}
    services = [
        _service("default", "kubernetes", "10.96.0.1", {"name": "https", "port": 443, "protocol": "TCP"}),
        _service("shop", "web-front", "10.96.3.4", {"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}),
        _service("shop", "headless", "None", {"port": 80}),
        _service("other", "elsewhere", "10.96.9.9", {"port": 80}),
    ]
    variables = service_environment(pod, services)
    assert variables["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert variables["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert variables["WEB_FRONT_SERVICE_HOST"] == "10.96.3.4"
    assert variables["WEB_FRONT_SERVICE_PORT"] == "80"
    assert variables["WEB_FRONT_SERVICE_PORT_HTTP"] == "80"
    assert variables["WEB_FRONT_PORT"] == "tcp://10.96.3.4:80"
    assert variables["WEB_FRONT_PORT_53_UDP"] == "udp://10.96.3.4:53"
    assert variables["WEB_FRONT_PORT_53_UDP_ADDR"] == "10.96.3.4"
    assert variables["WEB_FRONT_PORT_80_TCP_PROTO"] == "tcp"
    assert not any(name.startswith(("HEADLESS_", "ELSEWHERE_")) for name in variables)


def test_service_links_off_keeps_only_the_master_service():
    pod = {"metadata": {"namespace": "shop", "name": "p"}, "spec": {"enableServiceLinks": False}}
    services = [_service("default", "kubernetes", "10.96.0.1", {"port": 443}), _service("shop", "web", "10.96.3.4",
                                                                                        {"port": 80})]
    assert set(service_environment(pod, services)) == {
        "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_PORT", "KUBERNETES_PORT_443_TCP",
        "KUBERNETES_PORT_443_TCP_PROTO", "KUBERNETES_PORT_443_TCP_PORT", "KUBERNETES_PORT_443_TCP_ADDR"}


def test_the_containers_own_variables_win_over_service_variables():
    pod = {"metadata": {"namespace": "shop", "name": "p"}, "spec": {}}
    container = {"name": "c", "env": [{"name": "WEB_SERVICE_HOST", "value": "mine"}]}
    lines = environment(pod, container, "10.244.0.5", "10.0.0.1",
                                {"WEB_SERVICE_HOST": "10.96.3.4", "WEB_SERVICE_PORT": "80"})
    assert list(lines.items()) == [("WEB_SERVICE_PORT", "80"), ("WEB_SERVICE_HOST", "mine")]
