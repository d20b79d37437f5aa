"""Node lifecycle decisions: silence on the controller's clock, the Unknown condition, the taint, eviction times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from daemons.controllers import node_health
from daemons.controllers.node_health import (
    UNKNOWN_MESSAGE,
    UNKNOWN_REASON,
    UNREACHABLE_TAINT_KEY,
    Observation,
    all_silent,
    eviction_deadline,
    evictions,
    is_silent,
    observe,
    silent_since,
    unknown_status,
    unreachable_taint,
    with_unreachable_taint,
    without_unreachable_taint,
)

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
ADDED = "2026-01-01T12:00:00Z"
TAINT = {"key": UNREACHABLE_TAINT_KEY, "effect": "NoExecute", "timeAdded": ADDED}
OTHER_TAINTS = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": UNREACHABLE_TAINT_KEY, "effect": "NoSchedule"}]


def node(beat: str | None = "2026-01-01T11:59:50Z", status: str = "True", taints: list[Any] | None = None) -> Any:
    conditions = [{"type": "Ready", "status": status, "reason": "KubeletReady", "message": "ok",
                   "lastTransitionTime": "2026-01-01T11:00:00Z", **({"lastHeartbeatTime": beat} if beat else {})}]
    return {"metadata": {"name": "a"}, "spec": {"taints": taints} if taints else {},
            "status": {"capacity": {"cpu": "2"}, "conditions": conditions}}


def pod(tolerations: list[Any] | None = None, deleting: bool = False, name: str = "p") -> Any:
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if deleting:
        metadata["deletionTimestamp"] = ADDED
    return {"metadata": metadata, "spec": {"nodeName": "a", **({"tolerations": tolerations} if tolerations else {})}}


# --- silence ----------------------------------------------------------------------------------------


def test_a_node_is_silent_only_after_the_grace_period_since_its_heartbeat_was_seen_to_change() -> None:
    seen = observe(None, node(), now=100.0)
    assert seen == Observation(("2026-01-01T11:59:50Z", None), 100.0)
    assert not is_silent(seen.at, view_since=0.0, now=139.9, grace=40.0)
    assert is_silent(seen.at, view_since=0.0, now=140.0, grace=40.0)
    assert silent_since(seen.at, 0.0, 40.0) == 140.0


def test_the_same_heartbeat_seen_again_keeps_its_first_observation_and_a_new_one_restarts_the_clock() -> None:
    seen = observe(None, node(), now=100.0)
    assert observe(seen, node(), now=130.0) is seen
    fresh = observe(seen, node(beat="2026-01-01T12:00:00Z"), now=130.0)
    assert fresh.at == 130.0
    assert not is_silent(fresh.at, 0.0, now=160.0, grace=40.0)


def lease(renewed: str) -> dict:
    return {"metadata": {"name": "n1", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": renewed}}


def test_a_renewed_lease_is_a_heartbeat_while_the_nodes_status_stays_as_it_was() -> None:
    seen = observe(None, node(), now=100.0, lease=lease("2026-01-01T12:00:00.000001Z"))
    assert observe(seen, node(), now=120.0, lease=lease("2026-01-01T12:00:00.000001Z")) is seen
    renewed = observe(seen, node(), now=130.0, lease=lease("2026-01-01T12:00:10.000001Z"))
    assert renewed.at == 130.0
    assert not is_silent(renewed.at, 0.0, now=160.0, grace=40.0)
    assert is_silent(observe(renewed, node(), now=170.0, lease=lease("2026-01-01T12:00:10.000001Z")).at, 0.0,
                     now=170.0, grace=40.0)


def test_the_heartbeats_own_timestamp_does_not_matter_only_when_it_changed() -> None:
    """A kubelet whose clock is far behind still counts as alive while its stamps change."""
    seen = observe(None, node(beat="1999-01-01T00:00:00Z"), now=100.0)
    assert not is_silent(seen.at, 0.0, now=110.0, grace=40.0)


def test_a_node_without_any_heartbeat_counts_from_when_the_controller_first_saw_it() -> None:
    seen = observe(None, node(beat=None), now=50.0)
    assert seen.heartbeat == (None, None)
    assert not is_silent(seen.at, 0.0, now=80.0, grace=40.0)
    assert is_silent(seen.at, 0.0, now=90.0, grace=40.0)


def test_a_controller_restart_or_the_api_coming_back_counts_as_seeing_every_node() -> None:
    """Heartbeats last seen long ago, but the controller's view only (re)started at 200: nothing is silent yet."""
    seen = observe(None, node(), now=100.0)
    assert is_silent(seen.at, view_since=0.0, now=210.0, grace=40.0)
    assert not is_silent(seen.at, view_since=200.0, now=210.0, grace=40.0)
    assert is_silent(seen.at, view_since=200.0, now=240.0, grace=40.0)
    assert silent_since(seen.at, 200.0, 40.0) == 240.0


def test_when_every_node_is_silent_the_control_plane_is_suspected() -> None:
    assert all_silent([True, True])
    assert not all_silent([True, False])
    assert not all_silent([])


# --- the condition ----------------------------------------------------------------------------------


def test_the_ready_condition_turns_unknown_keeping_the_kubelets_heartbeat_and_everything_else() -> None:
    before = node()
    status = unknown_status(before, T0)
    assert status is not None
    (ready,) = status["conditions"]
    assert ready == {"type": "Ready", "status": "Unknown", "reason": UNKNOWN_REASON, "message": UNKNOWN_MESSAGE,
                     "lastHeartbeatTime": "2026-01-01T11:59:50Z", "lastTransitionTime": ADDED}
    assert status["capacity"] == {"cpu": "2"}
    assert before["status"]["conditions"][0]["status"] == "True"  # the cached object is left alone


def test_an_unknown_node_needs_no_second_write() -> None:
    assert unknown_status(node(status="Unknown"), T0) is None


def test_a_node_that_never_reported_gets_an_unknown_ready_condition() -> None:
    status = unknown_status({"metadata": {"name": "a"}}, T0)
    assert status is not None
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "Unknown")]


# --- the taint --------------------------------------------------------------------------------------


def test_the_unreachable_taint_is_added_stamped_and_other_taints_stay() -> None:
    taints = with_unreachable_taint(OTHER_TAINTS, T0)
    assert taints == [*OTHER_TAINTS, TAINT]
    assert with_unreachable_taint(taints, T0 + timedelta(minutes=5)) is None  # its timeAdded is kept
    assert unreachable_taint(node(taints=taints)) == TAINT


def test_removing_the_taint_leaves_every_other_taint_alone() -> None:
    assert without_unreachable_taint([*OTHER_TAINTS, TAINT]) == OTHER_TAINTS
    assert without_unreachable_taint(OTHER_TAINTS) is None
    assert without_unreachable_taint(None) is None
    assert without_unreachable_taint([TAINT]) == []


# --- eviction ---------------------------------------------------------------------------------------


def test_a_pod_without_a_matching_toleration_goes_after_the_eviction_timeout() -> None:
    no_match = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert eviction_deadline(pod(), TAINT, 30.0) == T0 + timedelta(seconds=30)
    assert eviction_deadline(pod(no_match), TAINT, 30.0) == T0 + timedelta(seconds=30)


def test_toleration_seconds_replace_the_timeout() -> None:
    toleration = {"key": UNREACHABLE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    assert eviction_deadline(pod([toleration]), TAINT, 30.0) == T0 + timedelta(seconds=5)
    longer = {**toleration, "tolerationSeconds": 600}
    assert eviction_deadline(pod([longer, toleration]), TAINT, 30.0) == T0 + timedelta(seconds=5)


def test_a_matching_toleration_without_seconds_keeps_the_pod_forever() -> None:
    forever = {"key": UNREACHABLE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}
    assert eviction_deadline(pod([forever]), TAINT, 30.0) is None
    assert eviction_deadline(pod([{"operator": "Exists"}]), TAINT, 30.0) is None  # tolerates every taint


def test_a_toleration_for_another_effect_or_key_does_not_match() -> None:
    other_effect = {"key": UNREACHABLE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
    other_key = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    assert eviction_deadline(pod([other_effect, other_key]), TAINT, 30.0) == T0 + timedelta(seconds=30)


def test_pods_due_now_and_the_next_deadline() -> None:
    soon = {"key": UNREACHABLE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    forever = {"key": UNREACHABLE_TAINT_KEY, "operator": "Exists"}
    pods = [pod(name="plain"), pod([soon], name="soon"), pod([forever], name="stays"),
            pod(deleting=True, name="going")]
    due, upcoming = evictions(pods, TAINT, T0 + timedelta(seconds=31), 30.0)
    assert [p["metadata"]["name"] for p in due] == ["plain"]
    assert upcoming == T0 + timedelta(seconds=60)
    due, upcoming = evictions(pods, TAINT, T0 + timedelta(seconds=10), 30.0)
    assert due == [] and upcoming == T0 + timedelta(seconds=30)


def test_a_taint_without_time_added_counts_as_old() -> None:
    assert eviction_deadline(pod(), {"key": UNREACHABLE_TAINT_KEY, "effect": "NoExecute"}, 30.0) \
        == datetime.fromtimestamp(30, UTC)


def test_timestamps_round_trip() -> None:
    assert node_health.parse_time(node_health.rfc3339(T0)) == T0
    assert node_health.parse_time("not a time") is None
