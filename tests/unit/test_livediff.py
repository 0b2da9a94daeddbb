"""apply --dry --diff's parts as tables: the fact's shell command run for real on local files, and the diffs."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from sparkguard.run.livediff import MAX_BYTES, LiveFile, LiveFiles, file_diff


def read_live(paths: tuple[str, ...], secret: tuple[str, ...] = ()) -> dict[str, LiveFile]:
    fact = LiveFiles()
    done = subprocess.run(["sh", "-c", fact.command(paths, secret)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return fact.process(done.stdout.splitlines())


def test_the_fact_reads_each_kind_of_file(tmp_path):
    (tmp_path / "plain").write_text("a\nb\n")
    (tmp_path / "empty").write_text("")
    (tmp_path / "big").write_bytes(b"x" * (MAX_BYTES + 1))
    (tmp_path / "key").write_text("TOKEN=s3cret\n")
    (tmp_path / "odd name; $(x)").write_text("quoted\n")
    paths = tuple(str(tmp_path / n) for n in ("plain", "empty", "big", "key", "absent", "odd name; $(x)"))
    live = read_live(paths, secret=(str(tmp_path / "key"),))
    assert live[paths[0]].content == b"a\nb\n"
    assert live[paths[1]].content == b"" and not live[paths[1]].too_large and not live[paths[1]].absent
    assert live[paths[2]].too_large and live[paths[2]].content is None
    assert live[paths[3]].content is None and live[paths[3]].sha256 == hashlib.sha256(b"TOKEN=s3cret\n").hexdigest()
    assert live[paths[4]].absent
    assert live[paths[5]].content == b"quoted\n"


@pytest.mark.parametrize(("live", "desired", "secret", "expected"), [
    (LiveFile(b"same\n", None), "same\n", False, None),                                # no change: no diff
    (LiveFile(b"", None), "", False, None),                                            # empty, still equal
    (LiveFile(b"old\n", None), "new\n", False, "-old\n+new\n"),
    (LiveFile(None, None), "new\n", False, "--- /etc/f (absent)\n"),                   # created
    (LiveFile(b"", None), "new\n", False, "--- /etc/f (node)\n"),                      # an empty file is not absent
    (LiveFile(b"x\n", None), "x", False, "\\ No newline at end of file"),
    (LiveFile(None, None, too_large=True), "x\n", False, "larger than"),
    (LiveFile(None, hashlib.sha256(b"k=1\n").hexdigest()), "k=1\n", True, None),      # secret, equal
    (LiveFile(None, hashlib.sha256(b"k=0\n").hexdigest()), "k=1\n", True, "secret file differs"),
    (LiveFile(None, None), "k=1\n", True, "secret file absent on the node"),
])
def test_diffs(live, desired, secret, expected):
    diff = file_diff("/etc/f", live, desired, secret)
    if expected is None:
        assert diff is None
    else:
        assert diff is not None and expected in diff
        if secret:
            assert "k=1" not in diff and "k=0" not in diff
