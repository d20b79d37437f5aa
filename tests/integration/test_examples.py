"""Every manifest in examples/ applies as it is, with our kubectl and with upstream kubectl."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from daemons.api.resources import by_kind
from tests.conftest import upstream_kubectls

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))
KUBECTLS = {"ours": Path(sys.executable).with_name("kubectl"), **upstream_kubectls()}


@pytest.mark.parametrize("kubectl", list(KUBECTLS.values()), ids=list(KUBECTLS))
@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_applies_and_every_object_is_stored(example, kubectl, apiserver, api, namespace):
    result = subprocess.run([str(kubectl), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, "apply", "-f",
                             str(example)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for document in yaml.safe_load_all(example.read_text()):
        resource = by_kind(document["apiVersion"], document["kind"])
        name = document["metadata"]["name"]
        assert f"{name} created" in result.stdout
        assert api.get(resource, name, namespace)["metadata"]["uid"]
