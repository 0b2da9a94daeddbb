"""sparkguard.dev.emulation, offline: how `sandbox up --arch` decides the kernel can run another architecture.

The kernel's binfmt_misc is stood in for by a directory (STAND-IN for /proc/sys/fs/binfmt_misc: a real
registration is made by the arm64 sandbox module, tests/sandbox/test_arm64.py). Each refusal is a sentence
that says what to do; nothing is written to a register that is not there.
"""

from __future__ import annotations

import pytest

from sparkguard.dev import emulation
from sparkguard.dev.emulation import EmulationError, ensure_emulation, host_arch

FOREIGN = "arm64" if host_arch() == "amd64" else "amd64"
NAME = f"qemu-{emulation.ARCHES[FOREIGN]}"
# The shape of Debian's /usr/lib/binfmt.d/qemu-aarch64.conf (qemu-user-static 1:7.2).
DEBIAN_LINE = (f":{NAME}:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:"
               "\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:"
               f"/usr/libexec/qemu-binfmt/{emulation.ARCHES[FOREIGN]}-binfmt-P:POCF")


@pytest.fixture
def kernel(tmp_path):
    binfmt, handlers = tmp_path / "binfmt_misc", tmp_path / "binfmt.d"
    binfmt.mkdir()
    handlers.mkdir()
    (binfmt / "register").write_text("")
    return binfmt, handlers


def entry(binfmt, state="enabled", flags="POCF"):
    (binfmt / NAME).write_text(f"{state}\ninterpreter /usr/libexec/qemu-binfmt/x\nflags: {flags}\noffset 0\n")


def test_the_machines_own_architecture_needs_nothing(kernel):
    binfmt, handlers = kernel
    assert ensure_emulation(host_arch(), binfmt=binfmt, handlers=handlers) == "native"
    assert (binfmt / "register").read_text() == ""


def test_an_enabled_handler_with_f_is_used_as_it_is(kernel):
    binfmt, handlers = kernel
    entry(binfmt)
    assert ensure_emulation(FOREIGN, binfmt=binfmt, handlers=handlers) == "already registered"
    assert (binfmt / "register").read_text() == ""


def test_debians_line_is_written_to_the_register(kernel):
    binfmt, handlers = kernel
    (handlers / f"{NAME}.conf").write_text(f"# Debian\n{DEBIAN_LINE}\n")
    with pytest.raises(EmulationError, match="left no handler"):   # the stand-in register makes no entry
        ensure_emulation(FOREIGN, log=lambda *_: None, binfmt=binfmt, handlers=handlers)
    assert (binfmt / "register").read_text() == DEBIAN_LINE + "\n"


@pytest.mark.parametrize(("setup", "words"), [
    (lambda b, h: None, "install qemu-user-static"),
    (lambda b, h: (h / f"{NAME}.conf").write_text(DEBIAN_LINE.replace(":POCF", ":POC") + "\n"), "without the F flag"),
    (lambda b, h: entry(b, state="disabled"), "disabled"),
    (lambda b, h: entry(b, flags="P"), "flags 'P'"),
])
def test_what_cannot_work_is_said_and_nothing_is_registered(kernel, setup, words):
    binfmt, handlers = kernel
    setup(binfmt, handlers)
    with pytest.raises(EmulationError, match=words):
        ensure_emulation(FOREIGN, log=lambda *_: None, binfmt=binfmt, handlers=handlers)
    assert (binfmt / "register").read_text() == ""


def test_an_unknown_architecture_is_refused_with_the_choices(kernel):
    with pytest.raises(EmulationError, match="choose one of amd64, arm64"):
        ensure_emulation("riscv64", binfmt=kernel[0], handlers=kernel[1])
