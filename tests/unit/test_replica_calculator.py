"""The HPA arithmetic against the numbers of upstream's documentation (algorithm, walkthrough, behavior)."""

from __future__ import annotations

import pytest

from daemons.api.models import HorizontalPodAutoscalerBehavior, HPAScalingPolicy, HPAScalingRules
from daemons.controllers.replica_calculator import (
    History,
    MetricError,
    Recommendation,
    ScaleEvent,
    average_value_replicas,
    group_pods,
    normalize,
    record_scale,
    scale_down_limit,
    scale_up_limit,
    utilization_replicas,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
LONG_AGO = "2020-01-01T00:00:00Z"
WINDOW = 60.0


def pod(name, cpu="200m", memory="64Mi", phase="Running", ready=True, started=LONG_AGO, transition=LONG_AGO,
        deleting=False):
    metadata = {"name": name, "namespace": "ns"}
    if deleting:
        metadata["deletionTimestamp"] = LONG_AGO
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value is not None}
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                              "lastTransitionTime": transition}]}
    if started:
        status["startTime"] = started
    return {"metadata": metadata, "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}]},
            "status": status}


def pods(count, **kwargs):
    return [pod(f"p{index}", **kwargs) for index in range(count)]


def usage(values):
    return {f"p{index}": value for index, value in enumerate(values)}


# --- the algorithm ----------------------------------------------------------------------------------


def test_doubling_and_halving_as_the_documented_ratio_says():
    # "if the current metric value is 200m, and the desired value is 100m, the number of replicas will be doubled"
    assert average_value_replicas(3, 100, "cpu", pods(3), usage([200, 200, 200]), NOW, WINDOW).replicas == 6
    # "If the current value is instead 50m, you'll halve the number of replicas"
    assert average_value_replicas(4, 100, "cpu", pods(4), usage([50] * 4), NOW, WINDOW).replicas == 2


def test_within_the_tolerance_nothing_changes():
    assert average_value_replicas(4, 100, "cpu", pods(4), usage([109] * 4), NOW, WINDOW).replicas == 4
    assert average_value_replicas(4, 100, "cpu", pods(4), usage([91] * 4), NOW, WINDOW).replicas == 4
    assert average_value_replicas(4, 100, "cpu", pods(4), usage([112] * 4), NOW, WINDOW).replicas == 5


def test_walkthrough_php_apache_at_305_percent_of_200m_goes_from_1_to_7():
    proposal = utilization_replicas(1, 50, "cpu", pods(1, cpu="200m"), usage([610]), NOW, WINDOW)
    assert (proposal.replicas, proposal.utilization, proposal.average) == (7, 305, 610)


def test_utilization_is_against_the_summed_container_requests():
    two_containers = pod("p0")
    two_containers["spec"]["containers"].append({"name": "side", "resources": {"requests": {"cpu": "300m"}}})
    proposal = utilization_replicas(1, 50, "cpu", [two_containers], usage([500]), NOW, WINDOW)
    assert (proposal.replicas, proposal.utilization) == (2, 100)


def test_a_missing_request_names_the_resource_container_and_pod():
    with pytest.raises(MetricError, match="missing request for cpu in container app of Pod p0"):
        utilization_replicas(1, 50, "cpu", pods(1, cpu=None), usage([100]), NOW, WINDOW)


def test_no_pods_or_no_metrics_is_an_error():
    with pytest.raises(MetricError, match="no pods returned by selector"):
        utilization_replicas(1, 50, "cpu", [], {}, NOW, WINDOW)
    with pytest.raises(MetricError, match="did not receive metrics"):
        utilization_replicas(2, 50, "cpu", pods(2), {}, NOW, WINDOW)


def test_memory_average_value():
    mebibyte = 2**20 * 1000  # milli-bytes
    proposal = average_value_replicas(2, 100 * mebibyte, "memory", pods(2), usage([150 * mebibyte] * 2), NOW, WINDOW)
    assert (proposal.replicas, proposal.average) == (3, 150 * mebibyte)


# --- missing and unready pods -----------------------------------------------------------------------


def test_missing_pods_count_as_idle_on_scale_up():
    # two pods at 100% of a 50% target would double to 4; the third pod without metrics counts as 0%:
    # (100 + 100 + 0) / 3 = 66% -> ceil(1.33 x 3) = 4
    proposal = utilization_replicas(3, 50, "cpu", pods(3), {"p0": 200, "p1": 200}, NOW, WINDOW)
    assert proposal.replicas == 4
    assert proposal.utilization == 100  # the status reports what was measured


def test_missing_pods_count_as_at_request_on_scale_down_and_can_cancel_it():
    # measured 10% against a 50% target; the two missing pods taken as 100% of their request:
    # (10 + 100 + 100) / 3 = 70% > 50%: the direction flips, so nothing changes
    assert utilization_replicas(3, 50, "cpu", pods(3), {"p0": 20}, NOW, WINDOW).replicas == 3
    # with one missing pod among four: (10 + 10 + 10 + 100) / 4 = 32% -> ceil(0.64 x 4) = 3
    assert utilization_replicas(4, 50, "cpu", pods(4), usage([20, 20, 20]), NOW, WINDOW).replicas == 3


def test_missing_average_value_pods_count_as_on_target_on_scale_down():
    # (20 + 20 + 100) / 3 = 46.7 against 100 -> ceil(0.466 x 3) = 2
    assert average_value_replicas(3, 100, "cpu", pods(3), {"p0": 20, "p1": 20}, NOW, WINDOW).replicas == 2


def test_unready_pods_are_left_out_and_count_as_idle_on_scale_up():
    pending = pod("p2", phase="Pending")
    # two ready pods at 150% of target (ratio 3); the pending one as 0: (150 + 150 + 0) / 3 = 100 -> 2 x 3 = 6
    proposal = utilization_replicas(3, 50, "cpu", [*pods(2), pending], {"p0": 300, "p1": 300, "p2": 999}, NOW,
                                    WINDOW)
    assert (proposal.replicas, proposal.utilization) == (6, 150)


def test_unready_pods_do_not_hold_back_a_scale_down():
    pending = pod("p2", phase="Pending")
    assert utilization_replicas(3, 50, "cpu", [*pods(2), pending], {"p0": 20, "p1": 20}, NOW, WINDOW).replicas == 1


def test_deleted_and_failed_pods_are_ignored():
    groups = group_pods([pod("a", deleting=True), pod("b", phase="Failed"), pod("c")], {"a": 1, "b": 1, "c": 1},
                        "cpu", NOW, WINDOW)
    assert (groups.ready_count, groups.ignored) == (1, frozenset({"a", "b"}))


def test_cpu_of_a_young_pod_counts_only_once_a_whole_window_after_it_became_ready():
    started = "2027-01-15T07:58:00Z"  # two minutes before NOW: within the CPU initialization period
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    fresh = pod("fresh", started=started, transition="2027-01-15T07:59:30Z")  # ready 30 s ago: sample includes start
    settled = pod("settled", started=started, transition="2027-01-15T07:58:30Z")  # ready 90 s ago
    groups = group_pods([fresh, settled], {"fresh": 1, "settled": 1}, "cpu", now, WINDOW)
    assert (groups.ready_count, groups.unready) == (1, frozenset({"fresh"}))
    # memory samples are taken as they are
    assert group_pods([fresh, settled], {"fresh": 1, "settled": 1}, "memory", now, WINDOW).ready_count == 2


def test_an_old_pod_that_never_became_ready_is_unready_one_that_went_unready_later_is_not():
    never = pod("never", ready=False, started=LONG_AGO, transition="2020-01-01T00:00:10Z")
    later = pod("later", ready=False, started=LONG_AGO, transition="2020-01-01T01:00:00Z")
    groups = group_pods([never, later], {"never": 1, "later": 1}, "cpu", NOW, WINDOW)
    assert (groups.ready_count, groups.unready) == (1, frozenset({"never"}))


# --- behavior ---------------------------------------------------------------------------------------


def rules(*policies, window=0, select="Max"):
    return HPAScalingRules(stabilization_window_seconds=window, select_policy=select,
                           policies=[HPAScalingPolicy(type=kind, value=value, period_seconds=period)
                                     for kind, value, period in policies])


def test_default_scale_up_is_the_larger_of_four_pods_and_doubling_per_15_seconds():
    defaults = HorizontalPodAutoscalerBehavior().scale_up
    assert scale_up_limit(1, [], defaults, NOW) == 5
    assert scale_up_limit(10, [], defaults, NOW) == 20
    # a scale-up 10 s ago from 10 to 20 used the period up: from 20 at most back to the period start's 2 x 10
    assert scale_up_limit(20, [ScaleEvent(10, NOW - 10)], defaults, NOW) == 20
    assert scale_up_limit(20, [ScaleEvent(10, NOW - 16)], defaults, NOW) == 40


def test_documented_scale_down_example_percent_wins_above_40_pods_with_select_max():
    # policies: 4 Pods per 60 s and 10 Percent per 60 s; "when the number of replicas is more than 40 the second
    # policy is used": 80 replicas may go down by 8 at once, then 72 by 7.2 -> 8 rounded (int(72 x 0.9) = 64)
    policies = rules(("Pods", 4, 60), ("Percent", 10, 60))
    assert scale_down_limit(80, [], policies, NOW) == 72
    assert scale_down_limit(72, [], policies, NOW) == 64
    assert scale_down_limit(40, [], policies, NOW) == 36
    assert scale_down_limit(30, [], policies, NOW) == 26  # 3 by the percentage, 4 by the pods policy: Max -> 4


def test_select_min_picks_the_smallest_change_and_disabled_none():
    policies = rules(("Pods", 4, 60), ("Percent", 10, 60), select="Min")
    assert scale_down_limit(80, [], policies, NOW) == 76
    assert scale_down_limit(80, [], rules(("Pods", 4, 60), select="Disabled"), NOW) == 80
    assert scale_up_limit(10, [], rules(("Pods", 4, 60), ("Percent", 100, 60), select="Min"), NOW) == 14


def test_scale_events_within_the_period_count_against_it():
    # "scale down 5 pods per minute": 3 removed 30 s ago leaves 2 for this minute
    assert scale_down_limit(10, [ScaleEvent(3, NOW - 30)], rules(("Pods", 5, 60)), NOW) == 8
    assert scale_down_limit(10, [ScaleEvent(3, NOW - 61)], rules(("Pods", 5, 60)), NOW) == 5


def test_scale_down_stabilization_applies_the_highest_recommendation_of_the_window():
    behavior = HorizontalPodAutoscalerBehavior()  # scale-down window 300 s
    history = History([Recommendation(8, NOW - 200), Recommendation(5, NOW - 100), Recommendation(9, NOW - 400)])
    result = normalize(history, behavior, current=10, desired=3, minimum=1, maximum=20, now=NOW)
    assert result.replicas == 8  # 9 is older than the window
    assert result.stabilized.reason == "ScaleDownStabilized"
    assert history.recommendations[2] == Recommendation(3, NOW)  # the stale entry is reused


def test_scale_up_stabilization_applies_the_lowest_recommendation_of_its_window():
    behavior = HorizontalPodAutoscalerBehavior(scale_up=rules(("Pods", 100, 15), window=60))
    history = History([Recommendation(4, NOW - 30)])
    assert normalize(history, behavior, current=2, desired=9, minimum=1, maximum=20, now=NOW).replicas == 4


def test_bounds_and_rate_limits_give_the_scaling_limited_reasons():
    behavior = HorizontalPodAutoscalerBehavior(scale_down=rules(("Percent", 100, 15)))
    up = normalize(History(), behavior, current=2, desired=50, minimum=1, maximum=6, now=NOW)
    assert (up.replicas, up.limited.reason, up.limited_by_policy) == (6, "TooManyReplicas", True)
    fast = normalize(History(), behavior, current=2, desired=50, minimum=1, maximum=100, now=NOW)
    assert (fast.replicas, fast.limited.reason) == (6, "ScaleUpLimit")  # 2 + 4 pods beats doubling
    down = normalize(History(), behavior, current=5, desired=1, minimum=2, maximum=6, now=NOW)
    assert (down.replicas, down.limited.reason) == (2, "TooFewReplicas")
    calm = normalize(History(), behavior, current=5, desired=5, minimum=2, maximum=6, now=NOW)
    assert (calm.replicas, calm.limited.reason, calm.limited_by_policy) == (5, "DesiredWithinRange", False)


def test_spec_example_scales_up_one_pod_per_15_seconds():
    behavior = HorizontalPodAutoscalerBehavior(scale_up=HPAScalingRules(
        policies=[HPAScalingPolicy(type="Pods", value=1, period_seconds=15)]))
    history = History()
    first = normalize(history, behavior, current=1, desired=6, minimum=1, maximum=6, now=NOW)
    assert first.replicas == 2
    record_scale(history, behavior, 1, 2, NOW)
    assert normalize(history, behavior, current=2, desired=6, minimum=1, maximum=6, now=NOW + 5).replicas == 2
    assert normalize(history, behavior, current=2, desired=6, minimum=1, maximum=6, now=NOW + 16).replicas == 3


def test_record_scale_forgets_events_older_than_the_longest_period():
    behavior = HorizontalPodAutoscalerBehavior()
    history = History(scale_up=[ScaleEvent(1, NOW - 100), ScaleEvent(2, NOW - 5)])
    record_scale(history, behavior, 3, 7, NOW)
    assert history.scale_up == [ScaleEvent(2, NOW - 5), ScaleEvent(4, NOW)]
    record_scale(history, behavior, 7, 6, NOW)
    assert history.scale_down == [ScaleEvent(1, NOW)]
