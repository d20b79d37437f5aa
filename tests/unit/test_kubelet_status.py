"""The pod status the kubelet reports: container states, phase by Kubernetes' rules, conditions, no-op writes."""

from datetime import UTC, datetime, timedelta

import pytest

from daemons.kubelet.decisions import ObservedContainer
from daemons.kubelet.status import (
    build_pod_status,
    compute_phase,
    container_status,
    pod_conditions,
    reported_ready,
    status_patch,
)

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SPEC = {"name": "main", "image": "busybox"}
RUNNING = {"running": {"startedAt": "2026-01-01T11:00:00Z"}}
WAITING = {"waiting": {"reason": "ContainerCreating"}}


def done(code):
    return {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}


def observed(state, **fields):
    return ObservedContainer(id="abc", name="main", state=state, image_id="sha256:1",
                             started_at=NOW - timedelta(minutes=5), **fields)


def statuses(*states, last=None):
    return [{"name": f"c{i}", "state": state, "lastState": last or {}} for i, state in enumerate(states)]


@pytest.mark.parametrize(("policy", "states", "phase"), [
    ("Always", [], "Pending"),
    ("Always", [WAITING], "Pending"),
    ("Always", [RUNNING, WAITING], "Pending"),
    ("Always", [RUNNING, RUNNING], "Running"),
    ("Never", [RUNNING, done(0)], "Running"),
    ("Always", [done(0)], "Running"),
    ("Never", [done(0), done(0)], "Succeeded"),
    ("Never", [done(0), done(1)], "Failed"),
    ("OnFailure", [done(0), done(0)], "Succeeded"),
    ("OnFailure", [done(1)], "Running"),
])
def test_phase(policy, states, phase):
    assert compute_phase({"spec": {"restartPolicy": policy}}, statuses(*states)) == phase


def test_a_container_in_crash_loop_back_off_counts_as_stopped_not_pending():
    crash_looping = statuses({"waiting": {"reason": "CrashLoopBackOff"}}, last=done(1))
    assert compute_phase({"spec": {"restartPolicy": "Always"}}, crash_looping) == "Running"


def test_status_of_a_container_not_created_yet():
    status = container_status(SPEC, None, None, waiting=("ErrImagePull", "no such image"))
    assert status["state"] == {"waiting": {"reason": "ErrImagePull", "message": "no such image"}}
    assert (status["ready"], status["restartCount"], status["image"]) == (False, 0, "busybox")
    assert "containerID" not in status


def test_status_of_a_running_container_with_a_previous_one():
    previous = ObservedContainer(id="old", name="main", state="exited", exit_code=137, oom_killed=True,
                                 started_at=NOW - timedelta(minutes=9), finished_at=NOW - timedelta(minutes=6))
    status = container_status(SPEC, observed("running", restart_count=1), previous, ready=True)
    assert status["state"] == {"running": {"startedAt": "2026-01-01T11:55:00Z"}}
    assert status["lastState"]["terminated"] == {
        "exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-01-01T11:51:00Z",
        "finishedAt": "2026-01-01T11:54:00Z", "containerID": "docker://old"}
    assert (status["ready"], status["started"], status["restartCount"]) == (True, True, 1)
    assert (status["containerID"], status["imageID"]) == ("docker://abc", "docker://sha256:1")


def test_status_of_a_container_backing_off_shows_its_last_run():
    dead = observed("exited", exit_code=1, finished_at=NOW, restart_count=2)
    status = container_status(SPEC, dead, None, waiting=("CrashLoopBackOff", "back-off 20s"), ready=True)
    assert status["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}}
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert (status["ready"], status["restartCount"]) == (False, 2)


def test_status_of_a_container_that_finished_for_good():
    status = container_status(SPEC, observed("exited", exit_code=0, finished_at=NOW), None)
    assert status["state"]["terminated"]["reason"] == "Completed"
    assert status["lastState"] == {}


def test_conditions_keep_their_transition_time_while_unchanged():
    old = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
           {"type": "ContainersReady", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    ready = [{"name": "a", "ready": True}]
    conditions = {c["type"]: c for c in pod_conditions(old, "Running", ready, "2026-01-01T12:00:00Z")}
    assert conditions["Ready"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert conditions["ContainersReady"] == {"type": "ContainersReady", "status": "True",
                                             "lastTransitionTime": "2026-01-01T12:00:00Z"}
    unready = {c["type"]: c for c in pod_conditions(None, "Running", [{"name": "a", "ready": False}], "t")}
    assert unready["Ready"]["reason"] == "ContainersNotReady"
    assert unready["Ready"]["message"] == "containers with unready status: [a]"
    assert unready["PodScheduled"]["status"] == unready["Initialized"]["status"] == "True"
    finished = {c["type"]: c for c in pod_conditions(None, "Succeeded", [{"name": "a", "ready": False}], "t")}
    assert finished["Ready"]["reason"] == "PodCompleted"


def test_build_pod_status_keeps_the_start_time_and_reports_ips():
    pod = {"spec": {"restartPolicy": "Always"}, "status": {"startTime": "2026-01-01T10:00:00Z"}}
    status = build_pod_status(pod, [container_status(SPEC, observed("running"), None, ready=True)],
                              host_ip="192.0.2.2", pod_ip="172.17.0.5", now=NOW)
    assert status["phase"] == "Running"
    assert status["startTime"] == "2026-01-01T10:00:00Z"
    assert (status["hostIP"], status["podIP"], status["podIPs"]) == ("192.0.2.2", "172.17.0.5",
                                                                     [{"ip": "172.17.0.5"}])


def test_an_unchanged_status_needs_no_write_and_a_changed_one_only_its_fields():
    pod = {"spec": {"restartPolicy": "Always"}, "status": {}}
    first = build_pod_status(pod, [container_status(SPEC, observed("running"), None, ready=False)],
                             host_ip="h", pod_ip="p", now=NOW)
    assert status_patch(None, first) is not None
    stored = {**first, "qosClass": "BestEffort"}  # fields the kubelet does not own do not count
    again = build_pod_status({**pod, "status": stored},
                             [container_status(SPEC, observed("running"), None, ready=False)],
                             host_ip="h", pod_ip="p", now=NOW + timedelta(seconds=30))
    assert status_patch(stored, again) is None
    ready = build_pod_status({**pod, "status": stored},
                             [container_status(SPEC, observed("running"), None, ready=True)],
                             host_ip="h", pod_ip="p", now=NOW + timedelta(seconds=30))
    assert set(status_patch(stored, ready)) == {"conditions", "containerStatuses"}
    assert status_patch({"podIP": "p", "reason": "Evicted"}, {"podIP": "p"}) == {"reason": None}


@pytest.mark.parametrize(("pod", "ready"), [
    ({"status": {"containerStatuses": [{"containerID": "docker://abc", "ready": True}]}}, True),
    ({"status": {"containerStatuses": [{"containerID": "docker://other", "ready": True}]}}, False),
    ({"status": {"containerStatuses": [{"containerID": "docker://abc", "ready": False}]}}, False),
    ({"status": {}}, False),
    ({}, False),
    (None, False),
])
def test_an_adopted_container_is_ready_only_if_the_api_says_so_for_the_same_container(pod, ready) -> None:
    assert reported_ready(pod, "abc") is ready
