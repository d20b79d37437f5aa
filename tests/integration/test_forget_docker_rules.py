"""roles/common's forget-docker-rules.sh against real iptables, in a network namespace of its own.

The namespace holds what a Docker daemon leaves in the nftables backend (its chains, the jumps to them, a
FORWARD policy of DROP) beside rules that are not Docker's; the script must take away only Docker's.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parents[2] / "roles/common/files/forget-docker-rules.sh"

DOCKER_LEFTOVERS = [
    ("filter", "-N DOCKER"),
    ("filter", "-N DOCKER-USER"),
    ("filter", "-N DOCKER-ISOLATION-STAGE-1"),
    ("filter", "-P FORWARD DROP"),
    ("filter", "-A FORWARD -j DOCKER-USER"),
    ("filter", "-A FORWARD -j DOCKER-ISOLATION-STAGE-1"),
    ("filter", "-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
    ("filter", "-A FORWARD -i br-0123456789ab ! -o br-0123456789ab -j ACCEPT"),
    ("filter", "-A DOCKER-USER -j RETURN"),
    ("nat", "-N DOCKER"),
    ("nat", "-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE"),
    ("nat", "-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER"),
]
OTHER_RULES = [
    ("filter", "-N KEEP-ME"),
    ("filter", "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT"),
    ("nat", "-A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE"),
]


@pytest.fixture
def in_namespace() -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """Runs a command in a fresh network namespace: its own, empty netfilter tables."""
    name = f"forget-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", name, *command], check=True, capture_output=True, text=True
        )

    try:
        yield run
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


def add(run: Callable[..., subprocess.CompletedProcess[str]], command: str, rules: list[tuple[str, str]]) -> None:
    for table, rule in rules:
        run(command, "-t", table, *rule.split())


def rules_of(run: Callable[..., subprocess.CompletedProcess[str]], command: str, table: str) -> list[str]:
    return run(command, "-t", table, "-S").stdout.splitlines()


def test_only_dockers_rules_leave_the_other_backend(in_namespace) -> None:
    add(in_namespace, "iptables-nft", DOCKER_LEFTOVERS + OTHER_RULES)
    add(in_namespace, "iptables-legacy", [("filter", "-N DOCKER"), ("filter", "-P FORWARD DROP")])

    first = in_namespace("bash", str(SCRIPT), "nft")

    assert "removed" in first.stdout
    filter_rules = rules_of(in_namespace, "iptables-nft", "filter")
    nat_rules = rules_of(in_namespace, "iptables-nft", "nat")
    assert not [rule for rule in filter_rules + nat_rules if "DOCKER" in rule or "docker0" in rule or "br-" in rule]
    assert "-P FORWARD ACCEPT" in filter_rules
    for table, rule in OTHER_RULES:
        assert rule in (filter_rules if table == "filter" else nat_rules)
    # The chosen backend is Docker's own now: nothing there is touched.
    legacy = rules_of(in_namespace, "iptables-legacy", "filter")
    assert "-N DOCKER" in legacy and "-P FORWARD DROP" in legacy

    again = in_namespace("bash", str(SCRIPT), "nft")
    assert again.stdout == ""


def test_a_drop_policy_stays_while_other_rules_remain_in_forward(in_namespace) -> None:
    add(in_namespace, "iptables-nft", [*DOCKER_LEFTOVERS, ("filter", "-A FORWARD -s 10.0.0.0/8 -j ACCEPT")])

    in_namespace("bash", str(SCRIPT), "nft")

    forward = in_namespace("iptables-nft", "-t", "filter", "-S", "FORWARD").stdout.splitlines()
    assert forward == ["-P FORWARD DROP", "-A FORWARD -s 10.0.0.0/8 -j ACCEPT"]


def test_a_backend_that_is_not_named_is_refused() -> None:
    refused = subprocess.run(["bash", str(SCRIPT), "iptables"], capture_output=True, text=True)
    assert refused.returncode == 2
    assert "backend must be nft or legacy" in refused.stderr
