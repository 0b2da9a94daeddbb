"""sparkguard.safe_write, the one writer of every output path (render, the Ansible export, the retry file, init):
never through a symbolic link, never over anything but a regular file, a new file renamed into place."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sparkguard import safe_write
from sparkguard.safe_write import OutputPathError


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_file_is_replaced_by_a_new_one_and_no_temporary_is_left(tmp_path):
    target = tmp_path / "a.yml"
    target.write_text("old\n")
    hard = tmp_path / "hard"
    os.link(target, hard)  # another name of the old file: a rename leaves it alone, a write in place would not
    safe_write.write(target, "new\n")
    assert target.read_text() == "new\n" and hard.read_text() == "old\n"
    assert names(tmp_path) == ["a.yml", "hard"]


@pytest.mark.parametrize("kind", ["link to a file", "dangling link", "link to a directory", "directory", "fifo"])
def test_a_link_or_a_non_file_at_the_path_is_refused_and_left_as_it_is(tmp_path, kind):
    victim, target = tmp_path / "victim", tmp_path / "out.yml"
    victim.write_text("keep\n")
    if kind == "link to a file":
        target.symlink_to(victim)
    elif kind == "dangling link":
        target.symlink_to(tmp_path / "created")
    elif kind == "link to a directory":
        target.symlink_to(tmp_path)
    elif kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)
    with pytest.raises(OutputPathError) as refused:
        safe_write.write(target, "x\n")
    assert refused.value.exit_code == 2 and str(target) in str(refused.value)
    assert victim.read_text() == "keep\n" and not (tmp_path / "created").exists()
    assert sorted(n for n in names(tmp_path) if n.endswith(".tmp")) == []
    assert safe_write.refusal(target) is not None


def test_below_a_root_directories_are_created_and_a_link_on_the_way_is_refused(tmp_path):
    root, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    safe_write.write(root / "a" / "b" / "c.txt", "x\n", root=root)
    assert (root / "a" / "b" / "c.txt").read_text() == "x\n"
    (root / "link").symlink_to(elsewhere)
    with pytest.raises(OutputPathError, match="link.*symbolic link"):
        safe_write.write(root / "link" / "d.txt", "x\n", root=root)
    assert names(elsewhere) == []


def test_exclusive_refuses_anything_there_and_the_mode_is_set_on_the_new_file_only(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    victim.chmod(0o600)
    link = tmp_path / "review.sh"
    link.symlink_to(victim)
    with pytest.raises(OutputPathError, match="already exists and is a symbolic link"):
        safe_write.write(link, "#!/bin/sh\n", mode=0o755, exclusive=True)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "keep\n"
    script = safe_write.write(tmp_path / "new.sh", "#!/bin/sh\n", mode=0o755, exclusive=True)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_remove_takes_a_file_or_the_link_itself_never_its_target(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "link").symlink_to(victim)
    safe_write.remove(tmp_path / "link")
    safe_write.remove(tmp_path / "missing")
    assert names(tmp_path) == ["victim"]
    with pytest.raises(OutputPathError, match="directory"):
        safe_write.remove(tmp_path)
