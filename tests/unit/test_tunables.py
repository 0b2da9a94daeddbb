"""The operator's environment knobs: defaults, accepted values, and refusals before any node is dialed."""

from __future__ import annotations

import pytest

from sparkguard.errors import EXIT_CONFIG_ERROR, ConfigError
from sparkguard.run import tunables
from tests.conftest import run_cli
from tests.unit.test_exit_codes import closed_port
from tests.unit.test_schema import GOOD

ALL = [tunables.CONNECT_TIMEOUT, tunables.LOCK_WAIT, tunables.SSH_SILENCE]


@pytest.mark.parametrize("tunable", ALL, ids=lambda t: t.name)
def test_unset_or_empty_is_the_default_and_a_number_in_range_is_taken(tunable, monkeypatch):
    monkeypatch.delenv(tunable.name, raising=False)
    assert tunable.seconds() == tunable.default
    monkeypatch.setenv(tunable.name, "")
    assert tunable.seconds() == tunable.default
    for value in (tunable.minimum, tunable.maximum):
        monkeypatch.setenv(tunable.name, str(value))
        assert tunable.seconds() == value


@pytest.mark.parametrize("raw", ["abc", "3; reboot", "-1", "1.5", " 10", "\u0663", "99999"])
@pytest.mark.parametrize("tunable", ALL, ids=lambda t: t.name)
def test_anything_else_is_refused_naming_the_variable_the_value_and_the_range(tunable, raw, monkeypatch):
    monkeypatch.setenv(tunable.name, raw)
    with pytest.raises(ConfigError) as refused:
        tunable.seconds()
    assert refused.value.exit_code == EXIT_CONFIG_ERROR
    paragraph = str(refused.value)
    assert f"field '{tunable.name}' = {raw!r}" in paragraph
    assert f"from {tunable.minimum} to {tunable.maximum} (unset: {tunable.default})" in paragraph


def test_the_bounds_are_the_edges_of_what_is_allowed(monkeypatch):
    monkeypatch.setenv("SPARKGUARD_SSH_SILENCE_S", "4")
    with pytest.raises(ConfigError):
        tunables.SSH_SILENCE.seconds()
    monkeypatch.setenv("SPARKGUARD_LOCK_WAIT_S", "3601")
    with pytest.raises(ConfigError):
        tunables.LOCK_WAIT.seconds()


@pytest.mark.parametrize(("tunable", "command"), [(t, "apply") for t in ALL] + [
    (tunables.CONNECT_TIMEOUT, "audit"), (tunables.SSH_SILENCE, "audit")], ids=lambda v: getattr(v, "name", v))
def test_apply_and_audit_refuse_a_bad_value_with_exit_2_before_dialing(tunable, command, inventory_dir, monkeypatch):
    # A closed port: had the run dialed it, the exit would be 4 (unreachable), not 2.
    path = inventory_dir(GOOD.replace("ssh_host: 192.0.2.11", f"ssh_host: 127.0.0.1\n      ssh_port: {closed_port()}"))
    monkeypatch.setenv(tunable.name, "ten")
    result = run_cli(command, str(path), timeout=120)
    assert result.returncode == EXIT_CONFIG_ERROR, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert f"environment: inventory, field '{tunable.name}' = 'ten': " in result.stderr, result.stderr
