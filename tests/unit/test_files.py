"""Atomic file writes: readers see the old file or the new one, and an unchanged file is left alone."""

from __future__ import annotations

import os
import stat
from unittest import mock

import pytest

from daemons.api.files import write_atomic, write_if_changed

pytestmark = pytest.mark.unit


def test_write_atomic_creates_directories_and_sets_mode(tmp_path):
    path = tmp_path / "etc" / "hosts"
    write_atomic(path, "10.0.0.1 web\n", mode=0o600)
    assert path.read_text() == "10.0.0.1 web\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_atomic(path, b"bytes too\n")
    assert path.read_bytes() == b"bytes too\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_failed_rename_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "config"
    path.write_text("old\n")
    with mock.patch("daemons.api.files.os.replace", side_effect=OSError("disk gone")), pytest.raises(OSError):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["config"]


def test_write_if_changed_writes_only_a_difference(tmp_path):
    path = tmp_path / "targets.json"
    assert write_if_changed(path, "[]\n")
    before = path.stat().st_ino
    assert not write_if_changed(path, "[]\n")
    assert path.stat().st_ino == before  # untouched: no rename happened
    assert write_if_changed(path, "[1]\n")
    assert path.read_text() == "[1]\n"
