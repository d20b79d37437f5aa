"""What the kubelet does with one container: restart policy, crash-loop back-off, spec changes, liveness."""

from datetime import UTC, datetime, timedelta

import pytest

from daemons.kubelet.decisions import (
    ObservedContainer,
    PodContainers,
    backoff_delay,
    next_action,
    should_restart,
)
from daemons.kubelet.spec import container_hash

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SPEC = {"name": "main", "image": "busybox", "command": ["sh", "-c", "exit 1"]}


def exited(exit_code=1, *, restarts=0, backoff=0, finished_ago=0.0, ran=1.0, **fields):
    finished = NOW - timedelta(seconds=finished_ago)
    return ObservedContainer(id="c1", name="main", state="exited", restart_count=restarts, backoff=backoff,
                             spec_hash=container_hash(SPEC), exit_code=exit_code,
                             started_at=finished - timedelta(seconds=ran), finished_at=finished, **fields)


def test_backoff_is_immediate_then_ten_seconds_doubling_to_five_minutes():
    assert [backoff_delay(n) for n in range(8)] == [0, 10, 20, 40, 80, 160, 300, 300]
    assert backoff_delay(1000) == 300


@pytest.mark.parametrize(("policy", "code", "expected"), [
    ("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 137, True),
    ("Never", 0, False), ("Never", 1, False),
])
def test_should_restart(policy, code, expected):
    assert should_restart(policy, code) is expected


def test_a_missing_container_is_created():
    assert next_action(SPEC, None, "Always", NOW).kind == "create"


def test_a_created_but_never_started_container_is_started():
    created = ObservedContainer(id="c1", name="main", state="created")
    assert next_action(SPEC, created, "Always", NOW).kind == "start"


def test_a_running_container_with_the_same_spec_is_kept():
    running = ObservedContainer(id="c1", name="main", state="running", spec_hash=container_hash(SPEC))
    assert next_action(SPEC, running, "Never", NOW).kind == "keep"


def test_a_running_container_without_a_hash_label_is_adopted():
    assert next_action(SPEC, ObservedContainer(id="c1", name="main", state="running"), "Always", NOW).kind == "keep"


def test_a_changed_spec_replaces_the_container_whatever_the_policy():
    running = ObservedContainer(id="c1", name="main", state="running", restart_count=2, backoff=1,
                                spec_hash=container_hash({**SPEC, "image": "busybox:old"}))
    action = next_action(SPEC, running, "Never", NOW)
    assert (action.kind, action.restart_count, action.backoff) == ("replace", 3, 1)


def test_a_failed_liveness_probe_kills_the_container():
    running = ObservedContainer(id="c1", name="main", state="running", spec_hash=container_hash(SPEC))
    assert next_action(SPEC, running, "Always", NOW, liveness_failed=True).kind == "kill"


def test_the_first_crash_restarts_at_once():
    action = next_action(SPEC, exited(), "Always", NOW)
    assert (action.kind, action.restart_count, action.backoff) == ("restart", 1, 1)


def test_a_later_crash_waits_out_its_back_off():
    action = next_action(SPEC, exited(restarts=3, backoff=2, finished_ago=5), "Always", NOW)
    assert action.kind == "wait"
    assert action.delay == pytest.approx(15)
    assert (action.restart_count, action.backoff) == (3, 2)


def test_after_the_back_off_the_container_restarts_with_a_longer_one_next():
    action = next_action(SPEC, exited(restarts=3, backoff=2, finished_ago=21), "Always", NOW)
    assert (action.kind, action.restart_count, action.backoff) == ("restart", 4, 3)


def test_ten_minutes_of_running_resets_the_back_off():
    action = next_action(SPEC, exited(restarts=7, backoff=6, ran=601), "Always", NOW)
    assert (action.kind, action.restart_count, action.backoff) == ("restart", 8, 1)


def test_on_failure_leaves_a_successful_container_done():
    assert next_action(SPEC, exited(0), "OnFailure", NOW).kind == "done"
    assert next_action(SPEC, exited(2), "OnFailure", NOW).kind == "restart"


def test_never_leaves_any_exited_container_done():
    assert next_action(SPEC, exited(1), "Never", NOW).kind == "done"


def test_terminated_reasons():
    assert exited(0).terminated_reason == "Completed"
    assert exited(1).terminated_reason == "Error"
    assert exited(137, oom_killed=True).terminated_reason == "OOMKilled"
    cannot_run = ObservedContainer(id="c", name="main", state="exited", exit_code=127, error="exec: not found")
    assert cannot_run.terminated_reason == "ContainerCannotRun"


def test_pod_containers_sort_each_containers_instances_newest_first():
    old = ObservedContainer(id="a", name="main", state="exited", restart_count=0)
    new = ObservedContainer(id="b", name="main", state="running", restart_count=1)
    pause = ObservedContainer(id="p", name="POD", state="running", kind="pause")
    group = PodContainers.of([old, pause, new])
    assert group.sandbox is pause
    assert group.newest("main") is new and group.previous("main") is old
    assert group.newest("other") is None and group.previous("other") is None
    assert {c.id for c in group.all()} == {"a", "b", "p"}
