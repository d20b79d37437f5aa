"""``kubectl set image``: which arguments are targets and images, and the patch it sends."""

import pytest

from cli.session import CLIError
from cli.verbs.set_image import image_patch, split_images

pytestmark = pytest.mark.unit

DEPLOYMENT = {"kind": "Deployment", "metadata": {"name": "web"}, "spec": {"template": {"spec": {
    "initContainers": [{"name": "init", "image": "busybox"}],
    "containers": [{"name": "app", "image": "nginx"}, {"name": "side", "image": "busybox"}]}}}}


def test_targets_come_before_the_image_changes():
    assert split_images(["deployment/web", "app=nginx:2"]) == (["deployment/web"], {"app": "nginx:2"})
    assert split_images(["deploy", "web", "*=busybox"]) == (["deploy", "web"], {"*": "busybox"})
    with pytest.raises(CLIError, match="before image changes"):
        split_images(["app=x", "deployment/web"])
    with pytest.raises(CLIError, match="at least one image update"):
        split_images(["deployment/web"])
    with pytest.raises(CLIError, match="CONTAINER=IMAGE"):
        split_images(["deployment/web", "app="])


def test_the_patch_names_only_the_containers_that_change():
    assert image_patch(DEPLOYMENT, {"app": "nginx:2"}) == {
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}}
    assert image_patch(DEPLOYMENT, {"*": "busybox"}) == {
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "busybox"}]}}}}
    assert image_patch(DEPLOYMENT, {"app": "nginx"}) is None
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a"}]}}
    assert image_patch(pod, {"c": "b"}) == {"spec": {"containers": [{"name": "c", "image": "b"}]}}


def test_a_container_the_template_lacks_is_an_error():
    with pytest.raises(CLIError, match='unable to find container named "nope"'):
        image_patch(DEPLOYMENT, {"nope": "x"})
