"""Probes: specs with Kubernetes' defaults, thresholds, and the manager's verdicts."""

import time

import pytest

from daemons.kubelet.probes import ProbeManager, ProbeSpec, ProbeState, probe_spec, resolve_port, run_probe

CONTAINER = {"name": "web", "ports": [{"name": "http", "containerPort": 8080}]}


def test_defaults_are_kubernetes_ones():
    spec = probe_spec({"tcpSocket": {"port": 8080}}, CONTAINER)
    assert (spec.action, spec.port, spec.initial_delay, spec.period, spec.timeout) == ("tcpSocket", 8080, 0, 10, 1)
    assert (spec.success_threshold, spec.failure_threshold) == (1, 3)


def test_http_probes_resolve_named_ports():
    spec = probe_spec({"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 2}, CONTAINER)
    assert (spec.action, spec.port, spec.path, spec.period) == ("httpGet", 8080, "/healthz", 2)
    assert resolve_port("9090", CONTAINER) == 9090
    with pytest.raises(ValueError, match="no port named"):
        resolve_port("grpc", CONTAINER)


def test_a_probe_without_an_action_is_refused():
    with pytest.raises(ValueError):
        probe_spec({"periodSeconds": 3}, CONTAINER)


def test_thresholds_flip_the_verdict():
    spec = ProbeSpec("exec", success_threshold=2, failure_threshold=3)
    readiness = ProbeState.initial("readiness")
    assert not readiness.healthy and ProbeState.initial("liveness").healthy
    once = readiness.record(True, spec)
    assert not once.healthy
    assert once.record(True, spec).healthy
    assert not once.record(False, spec).record(True, spec).healthy  # a failure restarts the count
    live = ProbeState.initial("liveness")
    for _ in range(2):
        live = live.record(False, spec)
        assert live.healthy
    assert not live.record(False, spec).healthy


def test_exec_probes_pass_on_exit_status_zero():
    spec = ProbeSpec("exec", command=("cat", "/tmp/ok"))
    assert run_probe(spec, "", "c1", lambda cid, cmd, timeout: (0, b"", b"")) == (True, "")
    assert run_probe(spec, "", "c1", lambda cid, cmd, timeout: (1, b"", b"cat: no such file\n")) == (
        False, "cat: no such file")

    def hangs(cid, cmd, timeout):
        raise TimeoutError("timed out")

    assert run_probe(spec, "", "c1", hangs) == (False, "timed out")


def test_tcp_probes_fail_on_a_closed_port():
    ok, message = run_probe(ProbeSpec("tcpSocket", port=1, timeout=1), "127.0.0.1", "c1", lambda *a: (0, b"", b""))
    assert not ok and message


def test_the_manager_reports_liveness_failures_and_readiness():
    results = []
    manager = ProbeManager(lambda cid, cmd, timeout: (0 if cmd == ["ready"] else 1, b"", b""),
                           lambda *args: results.append(args))
    manager.start()
    try:
        container = {"name": "main", "livenessProbe": {"exec": {"command": ["alive"]}, "failureThreshold": 1},
                     "readinessProbe": {"exec": {"command": ["ready"]}}}
        manager.track("ns/pod", "c1", container, "10.0.0.1")
        deadline = time.monotonic() + 5
        while not (manager.liveness_failed("c1") and manager.ready("c1")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert manager.liveness_failed("c1") and manager.ready("c1")
        assert ("ns/pod", "main", "liveness", False, "command ['alive'] exited with 1", True) in results
        assert manager.ready("other") is None
        manager.retain("ns/pod", set())
        assert manager.ready("c1") is None and not manager.liveness_failed("c1")
    finally:
        manager.stop()
