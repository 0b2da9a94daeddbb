"""The fact behind every Ensure: a check's exit status, whatever the check's shell does."""

from __future__ import annotations

import subprocess

import pytest

from sparkguard.engine.operations import CommandSucceeds


def outcome(check: str) -> bool:
    out = subprocess.run(["sh", "-c", CommandSucceeds().command(check)], capture_output=True, text=True, timeout=10)
    return CommandSucceeds().process(out.stdout.splitlines())


@pytest.mark.parametrize("check,expected", [
    ("true", True),
    ("false", False),
    ("! grep -q sparkguard /dev/null", True),
    # Multi-line checks (role vllm's sweep) end with `exit`; that must not end the fact's own shell.
    ("f() { exit 1; }\nfor x in a; do f; done\nexit 0", False),
    ("x=1\nexit 0", True),
    ("true  # a trailing comment", True),
    ("echo noise; echo more >&2; exit 3", False),
])
def test_exit_status_is_the_answer(check, expected):
    assert outcome(check) is expected
