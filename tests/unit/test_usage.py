import pytest

from cli.printers import tabwrite
from cli.session import CLIError
from cli.verbs.top import node_lines, pod_lines
from daemons.api.usage import (
    PrometheusClient,
    PrometheusError,
    Usage,
    node_queries,
    node_usage,
    parse_vector,
    pod_queries,
    pod_usage,
)
from daemons.apiserver.metrics_api import (
    cpu_quantity,
    memory_quantity,
    node_metrics,
    pod_metrics,
    resource_list,
    window_text,
)

pytestmark = pytest.mark.unit


def vector(*samples):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1700000000.123, str(value)]} for labels, value in samples]}}


def test_pod_queries_rate_cpu_over_one_minute_and_leave_out_the_sandbox():
    cpu, memory = pod_queries("web")
    assert cpu == ('sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total'
                   '{container!="",container!="POD",pod!="",namespace="web"}[1m]))')
    assert memory == ('sum by (namespace, pod, container) (container_memory_working_set_bytes'
                      '{container!="",container!="POD",pod!="",namespace="web"})')
    assert "namespace=" not in pod_queries()[0]


def test_a_namespace_is_quoted_as_a_promql_string():
    assert 'namespace="a\\"b"' in pod_queries('a"b')[0]


def test_node_queries_read_the_root_cgroup_by_node():
    cpu, memory = node_queries()
    assert 'id="/"' in cpu and "[1m]" in cpu and cpu.startswith("sum by (node)")
    assert memory == 'sum by (node) (container_memory_working_set_bytes{id="/"})'


def test_parse_vector_returns_labels_and_values_without_nan():
    body = vector(({"pod": "a"}, 0.25), ({"pod": "b"}, "NaN"), ({"pod": "c"}, "+Inf"))
    assert parse_vector(body, "q") == [({"pod": "a"}, 0.25)]


def test_parse_vector_names_the_query_on_an_error_answer():
    body = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
    with pytest.raises(PrometheusError, match=r"rate\(x\[1m\]\).*bad_data: parse error"):
        parse_vector(body, "rate(x[1m])")


def test_parse_vector_refuses_a_matrix():
    with pytest.raises(PrometheusError, match="'matrix'"):
        parse_vector({"status": "success", "data": {"resultType": "matrix", "result": []}}, "x[1m]")


class FakePrometheus(PrometheusClient):
    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def query(self, promql):
        self.asked.append(promql)
        return parse_vector(vector(*self.answers["cpu" if "container_cpu" in promql else "memory"]), promql)


def test_pod_usage_pairs_cpu_and_memory_per_container():
    fake = FakePrometheus({
        "cpu": [
            ({"namespace": "default", "pod": "web", "container": "app"}, 0.012),
            ({"namespace": "default", "pod": "web", "container": "sidecar"}, 0.001),
            ({"namespace": "default", "pod": "fresh", "container": "app"}, 0.5),
        ],
        "memory": [
            ({"namespace": "default", "pod": "web", "container": "app"}, 3 * 2**20),
            ({"namespace": "default", "pod": "web", "container": "sidecar"}, 2**20),
        ],
    })
    usage = pod_usage(fake, "default")
    # "fresh" has been scraped once: a CPU figure without memory is not a complete sample yet.
    assert usage == {("default", "web"): {"app": Usage(cpu=0.012, memory=3 * 2**20),
                                          "sidecar": Usage(cpu=0.001, memory=2**20)}}
    assert all('namespace="default"' in query for query in fake.asked)


def test_node_usage_by_node_label():
    fake = FakePrometheus({
        "cpu": [({"node": "n1"}, 0.75), ({"node": "n2"}, 0.1)],
        "memory": [({"node": "n1"}, 2**30)],
    })
    assert node_usage(fake) == {"n1": Usage(cpu=0.75, memory=2**30)}


# --- the metrics.k8s.io objects -------------------------------------------------------------------

@pytest.mark.parametrize(("cores", "text"), [(0.012, "12m"), (2.0, "2"), (0.0046203451, "4620345n"),
                                             (0.000005, "5u"), (0, "0"), (-0.1, "0")])
def test_cpu_quantities_are_canonical_at_nanocore_precision(cores, text):
    assert cpu_quantity(cores) == text


@pytest.mark.parametrize(("size", "text"), [(3 * 2**20, "3Mi"), (1234 * 1024, "1234Ki"), (2**30, "1Gi"),
                                            (1000, "1000"), (1536.4, "1536"), (0, "0")])
def test_memory_quantities_use_the_largest_exact_binary_suffix(size, text):
    assert memory_quantity(size) == text


def test_window_is_a_go_duration():
    assert window_text(60) == "1m0s" and window_text(30) == "30s" and window_text(90) == "1m30s"


def test_pod_metrics_as_metrics_server_returns_them():
    pod = {"metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}, "uid": "u1"},
           "spec": {"containers": [{"name": "app"}, {"name": "sidecar"}]}}
    usage = {"sidecar": Usage(cpu=0.001, memory=2**20), "app": Usage(cpu=0.25, memory=64 * 2**20)}
    assert pod_metrics(pod, usage, "2026-11-23T01:00:00Z") == {
        "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2026-11-23T01:00:00Z",
                     "labels": {"app": "web"}},
        "timestamp": "2026-11-23T01:00:00Z", "window": "1m0s",
        "containers": [{"name": "app", "usage": {"cpu": "250m", "memory": "64Mi"}},
                       {"name": "sidecar", "usage": {"cpu": "1m", "memory": "1Mi"}}],
    }


def test_node_metrics_carry_the_node_labels_and_usage():
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}}
    metrics = node_metrics(node, Usage(cpu=1.5, memory=2**30), "2026-11-23T01:00:00Z")
    assert metrics["kind"] == "NodeMetrics" and "namespace" not in metrics["metadata"]
    assert metrics["metadata"]["labels"] == {"kubernetes.io/hostname": "n1"}
    assert metrics["usage"] == {"cpu": "1500m", "memory": "1Gi"} and metrics["window"] == "1m0s"


def test_the_group_lists_nodes_and_pods_read_only():
    listed = {entry["name"]: entry for entry in resource_list()["resources"]}
    assert listed["nodes"]["kind"] == "NodeMetrics" and not listed["nodes"]["namespaced"]
    assert listed["pods"]["kind"] == "PodMetrics" and listed["pods"]["namespaced"]
    assert all(entry["verbs"] == ["get", "list"] for entry in listed.values())


# --- kubectl top's tables -------------------------------------------------------------------------

def _pod(namespace, name, *containers):
    return {"metadata": {"namespace": namespace, "name": name},
            "containers": [{"name": c, "usage": {"cpu": cpu, "memory": memory}} for c, cpu, memory in containers]}


def test_top_pods_sums_containers_and_rounds_like_kubectl():
    metrics = [_pod("default", "web", ("app", "4620345n", "3Mi"), ("sidecar", "1m", "1536Ki")),
               _pod("default", "db", ("pg", "250m", "64Mi"))]
    assert tabwrite(pod_lines(metrics), 3) == [
        "NAME   CPU(cores)   MEMORY(bytes)",
        "db     250m         64Mi",
        "web    6m           4Mi",
    ]


def test_top_pods_containers_with_namespaces_sorted_by_memory():
    metrics = [_pod("a", "web", ("app", "10m", "3Mi"), ("sidecar", "1m", "10Mi")), _pod("b", "db", ("pg", "1", "1Gi"))]
    assert pod_lines(metrics, containers=True, with_namespace=True, sort_by="memory") == [
        "NAMESPACE\tPOD\tNAME\tCPU(cores)\tMEMORY(bytes)",
        "b\tdb\tpg\t1000m\t1024Mi",
        "a\tweb\tsidecar\t1m\t10Mi",
        "a\tweb\tapp\t10m\t3Mi",
    ]
    assert pod_lines(metrics, sort_by="cpu", headers=False)[0].startswith("db\t")


def test_top_nodes_percentages_against_allocatable_and_unknown_nodes():
    metrics = [{"metadata": {"name": "n1"}, "usage": {"cpu": "500m", "memory": "1Gi"}}]
    nodes = [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "2", "memory": "3Gi"}}},
             {"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "2", "memory": "3Gi"}}}]
    assert tabwrite(node_lines(metrics, nodes), 3) == [
        "NAME   CPU(cores)   CPU(%)      MEMORY(bytes)   MEMORY(%)",
        "n1     500m         25%         1024Mi          33%",
        "n2     <unknown>    <unknown>   <unknown>       <unknown>",
    ]


def test_top_refuses_an_unknown_sort_key():
    with pytest.raises(CLIError, match="cpu or memory"):
        pod_lines([], sort_by="name")
