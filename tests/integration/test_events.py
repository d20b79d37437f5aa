"""Recording events through the real apiserver: created once, repeats bump the count."""

from daemons.api.resources import resolve
from daemons.machinery.events import EventRecorder

PODS = resolve("pods")
EVENTS = resolve("events")


def test_repeated_events_bump_the_count(api, namespace):
    pod = api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}, namespace)
    recorder = EventRecorder(api, "default-scheduler", host="node1")
    recorder.record(pod, "Normal", "Scheduled", "Successfully assigned web to node1")
    for _ in range(2):
        recorder.record(pod, "Warning", "BackOff", "Back-off restarting failed container",
                        field_path="spec.containers{main}")
    events = api.list(EVENTS, namespace, field_selector="involvedObject.name=web")["items"]
    by_reason = {event["reason"]: event for event in events}
    assert set(by_reason) == {"Scheduled", "BackOff"}
    assert by_reason["BackOff"]["count"] == 2 and by_reason["Scheduled"]["count"] == 1
    assert by_reason["Scheduled"]["source"] == {"component": "default-scheduler", "host": "node1"}
    assert by_reason["BackOff"]["involvedObject"]["uid"] == pod["metadata"]["uid"]
