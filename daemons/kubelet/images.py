"""Build the base images a node needs (``pause:latest``, ``busybox:latest``) offline, into the local Docker.

No public registry is reachable from the nodes, so the images are made from
what the host has: the pause sandbox is compiled from ``pause/pause.c`` with a
static libc, and busybox comes from Debian's ``busybox-static``. Both are
imported as single-layer images (``docker import``). The Ansible role calls the
same entry point: ``python -m daemons.kubelet.images pause|busybox|all``.
"""

from __future__ import annotations

import argparse
import io
import logging
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import docker

log = logging.getLogger(__name__)

PAUSE_SOURCE = Path(__file__).with_name("pause") / "pause.c"
BUSYBOX_BINARY = Path("/bin/busybox")
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
GROUP = b"root:x:0:\nnogroup:x:65534:\n"


def _add_file(archive: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = int(time.time())
    archive.addfile(info, io.BytesIO(data))


def _add_dir(archive: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = int(time.time())
    archive.addfile(info)


def compile_pause(output: Path) -> Path:
    """Compile the static pause binary (gcc, glibc's libc.a) to ``output``."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is needed to build the pause image (apt-get install gcc libc6-dev)")
    subprocess.run([gcc, "-static", "-Os", "-s", "-o", str(output), str(PAUSE_SOURCE)], check=True,
                   capture_output=True, text=True)
    return output


def pause_rootfs() -> bytes:
    """A tar of the pause rootfs: ``/pause`` and nothing else."""
    with tempfile.TemporaryDirectory(prefix="minik8s-pause-") as workdir:
        binary = compile_pause(Path(workdir) / "pause").read_bytes()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        _add_file(archive, "pause", binary, 0o755)
    return buffer.getvalue()


def busybox_rootfs(busybox: Path = BUSYBOX_BINARY) -> bytes:
    """A tar of a busybox rootfs: the static binary, a symlink per applet, and the usual empty folders."""
    if not busybox.exists():
        raise RuntimeError(f"{busybox} not found: apt-get install busybox-static")
    applets = subprocess.run([str(busybox), "--list-full"], check=True, capture_output=True, text=True).stdout.split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for folder in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "home", "var", "var/www",
                       "proc", "sys", "dev"):
            _add_dir(archive, folder)
        _add_dir(archive, "tmp", 0o1777)
        _add_file(archive, "bin/busybox", busybox.read_bytes(), 0o755)
        for applet in applets:
            if applet == "bin/busybox":
                continue
            link = tarfile.TarInfo(applet)
            link.type = tarfile.SYMTYPE
            link.linkname = "/bin/busybox"
            archive.addfile(link)
        _add_file(archive, "etc/passwd", PASSWD)
        _add_file(archive, "etc/group", GROUP)
    return buffer.getvalue()


BUILT_BY_LABEL = "io.minik8s.built-by"
BUILT_BY = f"LABEL {BUILT_BY_LABEL}=daemons.kubelet.images"
IMAGES = {
    "pause": (pause_rootfs, ['ENTRYPOINT ["/pause"]', BUILT_BY]),
    "busybox": (busybox_rootfs, ['CMD ["sh"]', "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin", BUILT_BY]),
}


def build(name: str, client: docker.DockerClient | None = None, tag: str = "latest") -> str:
    """Build image ``name`` (pause or busybox) as ``name:tag`` in the local Docker; return its id."""
    make_rootfs, changes = IMAGES[name]
    client = client or docker.from_env()
    client.api.import_image_from_data(make_rootfs(), repository=name, tag=tag, changes=changes)
    image_id = client.images.get(f"{name}:{tag}").id
    log.info("built %s:%s (%s)", name, tag, image_id)
    return image_id


def ensure(name: str, client: docker.DockerClient | None = None, tag: str = "latest") -> str:
    """The id of ``name:tag``, building it first when the local Docker does not have it."""
    client = client or docker.from_env()
    try:
        return client.images.get(f"{name}:{tag}").id
    except docker.errors.ImageNotFound:
        return build(name, client, tag)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m daemons.kubelet.images", description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+", choices=[*IMAGES, "all"], help="which images to build")
    parser.add_argument("--tag", default="latest")
    parser.add_argument("--if-missing", action="store_true", help="leave images that exist alone")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = list(IMAGES) if "all" in args.images else args.images
    for name in names:
        print((ensure if args.if_missing else build)(name, tag=args.tag))


if __name__ == "__main__":
    main()
