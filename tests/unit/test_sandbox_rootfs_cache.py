"""The sandbox rootfs cache is built once when two sandboxes come up at once (the suite's xdist workers do)."""

from __future__ import annotations

import threading
import time

from sparkguard.dev import sandbox


def test_two_builders_at_once_build_the_rootfs_once(tmp_path, monkeypatch):
    builds = []

    def fake_debootstrap(cmd, **_):
        # A debootstrap that takes a while: the second builder arrives meanwhile.
        builds.append(cmd)
        partial = tmp_path / "cache" / "bookworm.partial"
        time.sleep(0.3)
        (partial / "usr/sbin").mkdir(parents=True)
        (partial / "usr/sbin/sshd").write_text("")
        (partial / "etc/ssh").mkdir(parents=True)

    monkeypatch.setattr(sandbox, "_run", fake_debootstrap)
    monkeypatch.setattr(sandbox, "host_arch", lambda: "amd64")
    monkeypatch.setattr(sandbox, "ensure_emulation", lambda arch, log: "native")
    found, errors = [], []

    def build() -> None:
        try:
            found.append(sandbox.ensure_rootfs("bookworm", tmp_path / "cache", log=lambda *_: None, arch="amd64"))
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(builds) == 1, "the second builder must wait for the first and find the rootfs built"
    assert found == [tmp_path / "cache" / "bookworm"] * 2
    assert (tmp_path / "cache" / "bookworm" / "usr/sbin/sshd").exists()
