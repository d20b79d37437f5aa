"""roles/common's stop-orphaned-programs.py: what a killed supervisord left running is stopped before a new one starts.

A real orphan: a process group whose leader PID 1 adopted, running a program of a supervisord configuration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "roles/common/files/stop-orphaned-programs.py"


def orphan(argv: list[str]) -> int:
    """Start ``argv`` as the leader of its own process group, adopted by PID 1, as supervisord's children are."""
    launcher = ("import os, subprocess, sys\n"
                "child = subprocess.Popen(sys.argv[1:], start_new_session=True, stdin=subprocess.DEVNULL,"
                " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                "print(child.pid)\n")
    return int(subprocess.run([sys.executable, "-c", launcher, *argv], capture_output=True, text=True,
                              check=True, timeout=30).stdout)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_orphans_of_configured_programs_are_stopped_and_others_left(tmp_path: Path) -> None:
    program = tmp_path / "orphan-sleep"
    bystander = tmp_path / "bystander-sleep"
    shutil.copy("/bin/sleep", program)
    shutil.copy("/bin/sleep", bystander)
    conf_dir = tmp_path / "conf.d"
    conf_dir.mkdir()
    (tmp_path / "supervisord.conf").write_text("[supervisord]\n[include]\nfiles = conf.d/*.conf\n")
    (conf_dir / "direct.conf").write_text(f"[program:direct]\ncommand={program} 300\n")
    (conf_dir / "wrapped.conf").write_text(
        f'[program:wrapped]\ncommand=/bin/sh -c "true && exec {program} 300"\n')

    stray, spared = orphan([str(program), "300"]), orphan([str(bystander), "300"])
    try:
        assert os.getpgid(stray) == stray and running(stray)
        result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "supervisord.conf")],
                                capture_output=True, text=True, check=True, timeout=60)
        assert result.stdout.strip() == "stopped 1"
        assert not running(stray)
        assert running(spared), "a program no supervisord configuration names must be left alone"
    finally:
        for pid in (stray, spared):
            if running(pid):
                os.killpg(pid, 9)
