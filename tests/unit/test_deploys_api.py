"""sparkguard.deploys: one role for a team's own pyinfra deploy, validated like an inventory."""

from __future__ import annotations

import pytest

import sparkguard.deploys as deploys
from sparkguard.engine.desired import states_for
from sparkguard.errors import ConfigError


def test_a_role_is_applied_with_the_roles_it_needs_and_nothing_else():
    assert [r.name for r in deploys.with_requirements("earlyoom")] == ["earlyoom"]
    assert [r.name for r in deploys.with_requirements("swap")] == ["base", "swap"]
    assert [r.name for r in deploys.with_requirements("vllm")] == ["base", "vllm"]  # Role.uses, not requires
    config = deploys.role_config("gpu-01", "swap", {"mode": "training-off"}, {"memory_total_gib": 121.7})
    enabled = {name for name in ("base", "earlyoom", "swap", "recovery", "monitoring", "budget", "vllm")
               if getattr(config, name).enabled}
    assert enabled == {"base", "swap"}
    assert config.swap.mode == "training-off" and config.node.memory_total_gib == 121.7


@pytest.mark.parametrize("name", ["base", "earlyoom", "swap", "recovery", "monitoring", "budget", "vllm"])
def test_each_role_alone_validates_with_what_it_declares_it_needs(name):
    """A team's deploy of one role (sparkguard.deploys.ROLE) must not fail on a role it did not bring: vllm
    follows base's target (during_training: shrink, the default) and once raised 'base.enabled = False'."""
    settings = {"monitoring": {"enabled": True, "alertmanager": {"mode": "none"}},
                "vllm": {"image": "vllm/vllm-openai:v0.11.0", "cuda_total_gib": 100, "models": {"small": {
                    "model": "org/small", "shape": "Llama-3.1-8B", "max_model_len": 4096, "max_num_seqs": 4,
                    "port": 8000}}}}.get(name, {})
    config = deploys.role_config("gpu-01", name, settings, {"memory_total_gib": 121.7, "device_profile": "dgx-spark"})
    assert getattr(config, name).enabled


def test_recovery_alone_brings_base_whose_sysctl_check_validates_its_file():
    """recovery validates its sysctl file with base's sysctl-check: a deploy of recovery alone once left base off,
    and on a fresh node the validation had no program to run."""
    from sparkguard.roles.base.interface import SYSCTL_CHECK
    from sparkguard.roles.recovery.state import SYSCTL_FILE

    config = deploys.role_config("gpu-01", "recovery", {}, {"memory_total_gib": 121.7})
    assert config.base.enabled and config.recovery.enabled
    files = {f.path: f for state in states_for("gpu-01", config) for f in state.files}
    assert files[SYSCTL_FILE].validate.startswith(SYSCTL_CHECK) and SYSCTL_CHECK in files


@pytest.mark.parametrize(("settings", "field", "words"), [
    ({"term_percent": 200}, "earlyoom.term_percent", "less than 100"),
    ({"term_pecent": 9}, "earlyoom.term_pecent", "did you mean 'term_percent'"),
    ({"term_percent": 4, "kill_percent": 6}, "earlyoom.kill_percent", ""),
])
def test_bad_settings_are_the_inventory_paragraph(settings, field, words):
    with pytest.raises(ConfigError) as caught:
        deploys.role_config("gpu-01", "earlyoom", settings, {"memory_total_gib": 121.7})
    text = "\n".join(caught.value.paragraphs())
    assert "host 'gpu-01'" in text and f"field '{field}'" in text and words in text


def test_one_deploy_per_registered_role_and_no_other():
    from sparkguard.deploys import earlyoom, recovery

    assert callable(earlyoom) and callable(recovery) and earlyoom is deploys.earlyoom
    with pytest.raises(AttributeError, match="roles: base, earlyoom"):
        deploys.__getattr__("earlyom")
    with pytest.raises(ConfigError, match="no such role"):
        deploys.with_requirements("earlyom")


def test_plain_pyinfra_prints_a_refused_deploy_as_its_paragraph_not_a_traceback(tmp_path):
    """A team's deploy file run by pyinfra's own CLI: bad settings (or a node that is not what they declare)
    are one PreflightError, which pyinfra prints as the inventory's paragraph. --dry on @local: the deploy is
    refused before any fact is read, and nothing would run anyway."""
    import subprocess
    import sys

    (tmp_path / "team.py").write_text("from sparkguard.deploys import earlyoom\n\nearlyoom(settings={'term_percent': 200})\n")
    done = subprocess.run([sys.executable, "-m", "pyinfra", "--dry", "-y", "@local", "team.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "field 'earlyoom.term_percent'" in output and "less than 100" in output, output
    assert "Traceback" not in output, output
