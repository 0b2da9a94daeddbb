"""`sparkguard sandbox up` refuses values it cannot use, before it makes anything."""

from __future__ import annotations

from tests.conftest import run_cli


def test_sandbox_up_refuses_a_net_that_is_not_a_loopback_prefix_before_touching_anything(tmp_path):
    """--net's digits become node addresses, machine names and cgroup names: anything but 127.X.Y stops
    with exit 2, one paragraph naming the value, nothing made."""
    for hostile in ("127.0.10/../x", "127.0.256", "10.0.0", "127.0.1.1", "127.0.-1", "127.0.$(id)", "-127.0.1"):
        state = tmp_path / "state"
        result = run_cli("sandbox", "up", f"--net={hostile}", "--state-dir", str(state),
                         "--inventory-dir", str(tmp_path / "inventory"))
        assert result.returncode == 2, (hostile, result.stderr)
        assert repr(hostile) in result.stderr and "127.X.Y" in result.stderr and "Traceback" not in result.stderr
        assert not state.exists() and not (tmp_path / "inventory").exists()
