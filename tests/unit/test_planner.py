"""The node budget planner (`sparkguard plan`) and the over-commit check every command runs.

Regenerate tests/golden/plan-example.json after an intended change with
``SPARKGUARD_UPDATE_GOLDEN=1 pytest tests/unit/test_planner.py`` and review the diff.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from sparkguard.domain.memory.estimate import largest_seq_len
from sparkguard.domain.memory.planner import GIB, SHARED_KV_MARGIN
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.budget.plan import plan_host, training_spec
from tests.conftest import REPO, run_cli

EXAMPLE = REPO / "inventory" / "example"
INCIDENT = REPO / "tests" / "fixtures" / "incident-inventory"
GOLDEN_PLAN = REPO / "tests" / "golden" / "plan-example.json"

SPARK = """\
all:
  vars:
    node: {device_profile: dgx-spark, memory_total_gib: 121.7}
  hosts:
    h1:
      ssh_host: 192.0.2.1
"""


def plans(path):
    inventory = load_inventory(path, check_roles=False)
    return {h.name: plan_host(h.name, h.config) for h in inventory.hosts}


def host_yaml(extra: str) -> str:
    return SPARK + "".join(f"      {line}\n" for line in extra.strip("\n").splitlines())


def assert_adds_up(plan) -> None:
    total = plan.memory_total_bytes
    assert isinstance(total, int)
    policy = plan.during_training
    for s in plan.serving:
        for value in (s.weights_bytes, s.kv_cache_memory_bytes, s.overhead_bytes):
            assert isinstance(value, int) and value >= 0
        assert s.footprint_bytes == s.weights_bytes + s.kv_cache_memory_bytes + s.overhead_bytes
    for phase in plan.phases:
        size = (lambda s: s.footprint_bytes) if phase.name == "serving" else (lambda s: s.during_training_bytes(policy))
        assert phase.serving_bytes == sum(size(s) for s in plan.serving)
        expected_training = plan.training.peak_bytes if phase.name == "training" else 0
        assert phase.training_bytes == expected_training
        assert (plan.term_bytes + plan.os_reserve_bytes + phase.serving_bytes + phase.training_bytes
                + phase.headroom_bytes) == total
        assert phase.used_bytes + phase.headroom_bytes == total
    assert plan.headroom_bytes == min(p.headroom_bytes for p in plan.phases)
    if plan.training and plan.training.spec is not None:
        assert plan.training.peak_bytes == plan.training.estimate_bytes + plan.training.cpu_overhead_bytes


@pytest.mark.parametrize("path", [EXAMPLE, INCIDENT])
def test_budgets_add_up_exactly(path):
    for plan in plans(path).values():
        assert_adds_up(plan)


@pytest.mark.parametrize("policy", ["shrink", "stop", "keep"])
def test_budgets_add_up_for_every_policy_and_sizing(inventory_dir, policy):
    path = inventory_dir(host_yaml(f"""
vllm:
  during_training: {policy}
  models:
    a: {{model: m/a, shape: Llama-3.1-8B, max_model_len: 8192, max_num_seqs: 3, port: 8000}}
    b: {{model: m/b, weights_gib: 10.5, kv_cache_gib: 3.3, shared_kv_cache_gib: 1.1, port: 8001}}
    c: {{model: m/c, shape: gemma-3-27B, weights_dtype: fp8, kv_cache_dtype: fp8, port: 8002}}
budget:
  os_reserve_gib: 7.3
  training: {{peak_gib: 20.25}}
"""))
    plan = plans(path)["h1"]
    assert plan.problems == []
    assert_adds_up(plan)
    a, b, c = plan.serving
    assert b.weights_bytes == round(10.5 * GIB) and b.kv_cache_memory_bytes == round(3.3 * GIB)
    # a: 3 sequences of 8192 tokens x 32 layers x 2 x 8 kv heads x 128 x 2 bytes (Llama 3.1 8B)
    assert a.kv_cache_memory_bytes == 3 * 8192 * 32 * 2 * 8 * 128 * 2
    assert c.fp8_weights_bytes is None and c.weights_bytes < 30e9  # fp8: 1 byte per linear parameter (bf16: 54.8 GB)
    for s in plan.serving:
        # utilization covers the footprint (vLLM's startup check), rounded up to 0.01
        assert s.gpu_memory_utilization * plan.cuda_total_bytes >= s.footprint_bytes
        assert (s.gpu_memory_utilization - 0.01) * plan.cuda_total_bytes < s.footprint_bytes
    if policy == "shrink":
        assert b.during_training_bytes(policy) == b.weights_bytes + round(1.1 * GIB) + b.overhead_bytes
    if policy == "stop":
        assert plan.phase("training").serving_bytes == 0


def test_example_fits_and_matches_golden_plan():
    result = run_cli("plan", "inventory/example", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    if os.environ.get("SPARKGUARD_UPDATE_GOLDEN"):
        GOLDEN_PLAN.write_text(result.stdout)
    assert document == json.loads(GOLDEN_PLAN.read_text())
    spark = next(h for h in document["hosts"] if h["host"] == "spark-01")
    assert spark["fits"] is True and spark["headroom_bytes"] > 0
    assert spark["memory_total_bytes"] == round(121.7 * GIB)
    served = spark["serving"][0]
    assert served["gpu_memory_utilization"] < 0.5 and served["kv_cache_memory_bytes"] == 16 * GIB
    assert spark["training"]["source"] == "estimated" and spark["training"]["spec"]["seq_len"] == 8192


def test_incident_is_rejected_with_numbers_and_computed_ways_out():
    plan = plans(INCIDENT)["spark-incident"]
    assert plan.fits is False
    serving = plan.serving[0]
    assert serving.gpu_memory_utilization == 0.85 and not serving.explicit_kv
    assert serving.footprint_bytes == int(0.85 * plan.cuda_total_bytes)  # 0.85 of the WHOLE device: ~101.7 GiB
    assert plan.training.peak_bytes > 110 * GIB

    result = run_cli("plan", str(INCIDENT))
    assert result.returncode == 3  # does not fit (2 is for input that cannot be used)
    assert "DOES NOT FIT" in result.stdout
    # The seq_len the message offers is the estimator's, for the room shrinking leaves (one sequence + 25%).
    room = plan.memory_total_bytes - plan.term_bytes - plan.os_reserve_bytes - (
        serving.weights_bytes + math.ceil(serving.min_kv_bytes * SHARED_KV_MARGIN) + serving.overhead_bytes)
    shorter = largest_seq_len(training_spec(load_inventory(INCIDENT, check_roles=False).hosts[0].config.budget.training),
                              room - plan.training.cpu_overhead_bytes)
    assert 8192 < shorter < 16384
    assert f"at most {shorter:,}" in result.stdout

    for command in (["validate", str(INCIDENT)], ["render", str(INCIDENT), "--out", "/tmp/sparkguard-never"],
                    ["apply", str(INCIDENT)]):
        result = run_cli(*command)
        assert result.returncode == 3, (command, result.stderr)
        err = result.stderr
        assert "field 'budget.training.seq_len' = 16384" in err
        assert "over-committed while the training job runs" in err
        assert "MemTotal is 121.70 GiB" in err and "101.66 GiB" in err  # vLLM at 0.85
        assert f"at most {shorter:,}" in err                              # shorter seq_len, computed
        assert "shared_kv_cache_gib" in err and "kv_cache_gib" in err       # smaller KV
        assert "weights_dtype: fp8" in err                                  # quantized serving
        assert "without co-location" in err                                 # not co-locating
        assert ("nothing was touched" in err) == (command[0] == "apply")  # only apply touches nodes


def test_json_of_rejected_plan_still_shows_the_numbers():
    result = run_cli("plan", str(INCIDENT), "--json")
    assert result.returncode == 3
    host = json.loads(result.stdout)["hosts"][0]
    assert host["fits"] is False and host["headroom_bytes"] < 0
    assert host["serving"][0]["gpu_memory_utilization"] == 0.85
    assert host["training"]["peak_bytes"] > 110 * GIB and host["ways_out"]


def test_declared_peak_over_commit_names_the_peak(inventory_dir):
    path = inventory_dir(host_yaml("budget: {training: {peak_gib: 115}}"))
    result = run_cli("validate", str(path))
    assert result.returncode == 3
    assert "field 'budget.training.peak_gib'" in result.stderr
    assert "lower the job's peak by" in result.stderr


def test_serving_alone_over_commit(inventory_dir):
    path = inventory_dir(host_yaml("vllm: {during_training: keep, models: {big: {model: x, weights_gib: 60, kv_cache_gib: 50}}}"))
    result = run_cli("validate", str(path))
    assert result.returncode == 2  # also an input problem (vllm.image): input wins over does-not-fit
    assert "over-committed with serving alone" in result.stderr and "serve fewer models" in result.stderr


def test_a_host_without_serving_or_training_has_no_budget_role(inventory_dir):
    result = run_cli("validate", str(inventory_dir(host_yaml(""))))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("extra, field, words", [
    ("vllm: {models: {m: {model: x, weights_gib: 1, kv_cache_gib: 1, options: {enable-prefix-cacheing: true}}}}",
     "vllm.models.m.options.enable-prefix-cacheing", "did you mean 'enable-prefix-caching'"),
    ("vllm: {models: {m: {model: x, weights_gib: 1, kv_cache_gib: 1, options: {max_num_batched_tokens: 8}}}}",
     "vllm.models.m.options.max_num_batched_tokens", "write 'max-num-batched-tokens'"),
    ("vllm: {models: {m: {model: x, weights_gib: 1, kv_cache_gib: 1, options: {gpu-memory-utilization: 0.9}}}}",
     "vllm.models.m.options.gpu-memory-utilization", "set by sparkguard from the budget"),
    ("vllm: {models: {m: {model: x}}}", "vllm.models.m.weights_gib", "is required when no `shape`"),
    ("vllm: {models: {m: {model: x, shape: Llama-3.1-8B, max_model_len: 131072, kv_cache_gib: 1}}}",
     "vllm.models.m.kv_cache_gib", "smaller than one max_model_len"),
    ("vllm: {models: {Bad_Name: {model: x, weights_gib: 1, kv_cache_gib: 1}}}", "vllm.models.Bad_Name",
     "lowercase letters"),
    ("vllm: {image: 'vllm/vllm-openai:latest', models: {m: {model: x, weights_gib: 1, kv_cache_gib: 1}}}",
     "vllm.image", "pin a tag"),
    ("vllm: {models: {m: {model: x, shape: no-such-model}}}", "vllm.models.m.shape", "unknown model"),
    ("vllm: {models: {m: {model: x, weights_gib: 1, kv_cache_gib: 1, gpu_memory_utilization: 0.01}}}",
     "vllm.models.m.gpu_memory_utilization", "below what the instance takes"),
])
def test_vllm_settings_errors_fail_validation(inventory_dir, extra, field, words):
    result = run_cli("validate", str(inventory_dir(host_yaml(extra))))
    assert result.returncode == 2, result.stdout
    assert f"field '{field}'" in result.stderr and words in result.stderr, result.stderr


def test_no_cuda_total_for_a_cpu_only_node(inventory_dir):
    text = host_yaml("vllm: {models: {m: {model: x, weights_gib: 1, kv_cache_gib: 1}}}").replace("dgx-spark", "cpu-only")
    result = run_cli("validate", str(inventory_dir(text)))
    assert result.returncode == 2 and "field 'vllm.cuda_total_gib'" in result.stderr


def test_budget_needs_declared_memory(inventory_dir):
    text = host_yaml("budget: {training: {peak_gib: 10}}").replace(", memory_total_gib: 121.7", "")
    result = run_cli("validate", str(inventory_dir(text)))
    assert result.returncode == 2 and "field 'node.memory_total_gib'" in result.stderr


def test_served_model_settings_are_documented_in_planner_docs():
    """docs/settings.md does not descend into vllm.models.<name>; docs/planner.md carries that table."""
    from sparkguard.docs import _rows
    from sparkguard.roles.vllm.settings import ServedModel

    text = (REPO / "docs" / "planner.md").read_text()
    for row in _rows(ServedModel, "vllm.models.<name>."):
        assert row in text, f"docs/planner.md lacks (regenerate the table):\n{row}"


def test_default_shrunk_kv_keeps_a_margin_over_one_sequence():
    """vLLM refuses a KV cache below one max_model_len sequence and rounds to blocks: exactly one fails."""
    from sparkguard.domain.memory.planner import default_shared_kv

    one = 2 * GIB
    assert default_shared_kv(one, 16 * GIB) == int(2.5 * GIB)
    assert default_shared_kv(one, int(2.2 * GIB)) == int(2.2 * GIB)      # never above the full-size KV
    spark = plans(EXAMPLE)["spark-01"].serving[0]
    assert spark.shared_kv_cache_memory_bytes > spark.min_kv_bytes
