"""Init containers: one at a time, in order, each to exit 0 before the next and before the app containers;
the pod's phase, Initialized condition and initContainerStatuses while they run."""

from datetime import UTC, datetime, timedelta

from daemons.kubelet.decisions import ObservedContainer, PodContainers, init_progress
from daemons.kubelet.spec import container_hash
from daemons.kubelet.status import build_pod_status

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
FIRST = {"name": "first", "image": "busybox"}
SECOND = {"name": "second", "image": "busybox"}
INITS = [FIRST, SECOND]


def container(spec, state, exit_code=None, finished_ago=100.0):
    finished = NOW - timedelta(seconds=finished_ago) if state == "exited" else None
    return ObservedContainer(id=f"id-{spec['name']}", name=spec["name"], state=state, spec_hash=container_hash(spec),
                             exit_code=exit_code, started_at=NOW - timedelta(seconds=200), finished_at=finished)


def progress(*observed, policy="Always"):
    return init_progress(INITS, PodContainers.of(list(observed)), policy, NOW, ["main"])


def test_the_first_init_container_is_created_alone():
    step = progress()
    assert (dict(step.actions), step.initialized) == ({"first": step.actions["first"]}, False)
    assert step.actions["first"].kind == "create"


def test_the_next_one_waits_for_the_previous_to_exit_zero():
    assert progress(container(FIRST, "running")).actions["first"].kind == "keep"
    step = progress(container(FIRST, "exited", 0))
    assert list(step.actions) == ["second"] and step.actions["second"].kind == "create"


def test_all_done_lets_the_app_containers_run():
    step = progress(container(FIRST, "exited", 0), container(SECOND, "exited", 0))
    assert (dict(step.actions), step.initialized) == ({}, True)


def test_an_existing_app_container_means_initialized():
    app = ObservedContainer(id="a", name="main", state="running")
    assert progress(app).initialized


def test_a_failed_init_container_restarts_with_backoff_unless_policy_never():
    failed = container(FIRST, "exited", 1)
    assert progress(failed).actions["first"].kind == "restart"
    assert progress(failed, policy="OnFailure").actions["first"].kind == "restart"
    just_failed = ObservedContainer(id="x", name="first", state="exited", spec_hash=container_hash(FIRST),
                                    exit_code=1, backoff=2, started_at=NOW - timedelta(seconds=2), finished_at=NOW)
    assert progress(just_failed).actions["first"].kind == "wait"
    never = progress(failed, policy="Never")
    assert never.failed and never.actions["first"].kind == "done" and not never.initialized


def _status(init_states, policy="Always", initialized=False):
    pod = {"spec": {"restartPolicy": policy, "initContainers": INITS, "containers": [{"name": "main"}]}}
    inits = [{"name": spec["name"], "state": state, "lastState": {}} for spec, state in zip(INITS, init_states,
                                                                                           strict=True)]
    main = {"name": "main", "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}}
    return build_pod_status(pod, [main], host_ip="h", pod_ip="", now=NOW, init_statuses=inits,
                            initialized=initialized)


def test_while_initializing_the_pod_is_pending_and_not_initialized():
    status = _status([{"terminated": {"exitCode": 0}}, {"running": {}}])
    assert status["phase"] == "Pending"
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert (initialized["status"], initialized["reason"], initialized["message"]) == (
        "False", "ContainersNotInitialized", "containers with incomplete status: [second]")
    assert [s["name"] for s in status["initContainerStatuses"]] == ["first", "second"]


def test_a_failed_init_container_fails_the_pod_only_under_policy_never():
    failed = [{"terminated": {"exitCode": 1, "reason": "Error"}}, {"waiting": {"reason": "PodInitializing"}}]
    assert _status(failed, policy="Never")["phase"] == "Failed"
    assert _status(failed, policy="OnFailure")["phase"] == "Pending"
