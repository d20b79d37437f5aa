import pytest

from daemons.api.quantity import cpu_millis, format_cpu, format_memory, memory_bytes

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("value", "millis"), [("100m", 100), ("0.1", 100), ("1", 1000), (2, 2000), ("1.5", 1500),
                                               ("250u", 1)])
def test_cpu_millis(value, millis):
    assert cpu_millis(value) == millis


@pytest.mark.parametrize(("value", "size"), [("64Mi", 64 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("128", 128),
                                             ("1.5Ki", 1536), ("1e3", 1000)])
def test_memory_bytes(value, size):
    assert memory_bytes(value) == size


@pytest.mark.parametrize("value", ["", "ten", "10XB", "1.2.3", True])
def test_bad_quantities_are_refused(value):
    with pytest.raises(ValueError, match="quantity"):
        memory_bytes(value)


def test_formatting_round_trips():
    assert format_cpu(1500) == "1500m" and format_cpu(2000) == "2"
    assert format_memory(64 * 2**20) == "64Mi" and format_memory(1000) == "1000"
