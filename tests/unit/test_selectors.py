import pytest

from daemons.api.selectors import FieldSelectorQuery, LabelSelectorQuery, SelectorError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app!=web", {"app": "db"}, True),
        ("app!=web", {}, True),
        ("tier in (front, back)", {"tier": "back"}, True),
        ("tier in (front,back)", {"tier": "db"}, False),
        ("tier notin (front)", {}, True),
        ("tier notin (front)", {"tier": "front"}, False),
        ("canary", {"canary": ""}, True),
        ("canary", {}, False),
        ("!canary", {}, True),
        ("!canary", {"canary": "yes"}, False),
        ("app=web,!canary,tier in (a,b)", {"app": "web", "tier": "a"}, True),
        ("app=web,!canary,tier in (a,b)", {"app": "web", "tier": "a", "canary": "1"}, False),
        ("example.com/team=x", {"example.com/team": "x"}, True),
        ("", {"anything": "1"}, True),
    ],
)
def test_label_selector_matches(selector, labels, expected):
    assert LabelSelectorQuery.parse(selector).matches(labels) is expected


@pytest.mark.parametrize("selector", ["app=web,", "app in ()", "app in front", "=web", "app=web,(x)", "a b"])
def test_label_selector_rejects_bad_syntax(selector):
    with pytest.raises(SelectorError):
        LabelSelectorQuery.parse(selector)


def test_label_selector_round_trips_to_text():
    text = "app=web,tier in (a,b),!canary,release"
    assert LabelSelectorQuery.parse(str(LabelSelectorQuery.parse(text))) == LabelSelectorQuery.parse(text)


def test_structured_selector_uses_match_labels_and_expressions():
    query = LabelSelectorQuery.from_label_selector(
        {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}
    )
    assert query.matches({"app": "web", "tier": "front"})
    assert not query.matches({"app": "web", "tier": "db"})
    assert str(query) == "app=web,tier notin (db)"


def test_structured_selector_requires_values_for_in():
    with pytest.raises(SelectorError, match="values"):
        LabelSelectorQuery.from_label_selector({"matchExpressions": [{"key": "a", "operator": "In"}]})


def test_field_selector_on_supported_fields():
    pod = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"nodeName": "n1"},
           "status": {"phase": "Running"}}
    assert FieldSelectorQuery.parse("metadata.name=web,status.phase!=Pending").matches(pod)
    assert not FieldSelectorQuery.parse("spec.nodeName=n2").matches(pod)
    assert FieldSelectorQuery.parse("spec.nodeName=").matches({"metadata": {"name": "x"}, "spec": {}})


def test_field_selector_names_an_unsupported_field():
    with pytest.raises(SelectorError, match=r"spec\.hostname"):
        FieldSelectorQuery.parse("spec.hostname=x")
