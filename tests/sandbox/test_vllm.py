"""Role vllm on a real systemd node (native-binary mode), with a STAND-IN for the GPU server.

The stand-in (/opt/standin/vllm, a small Python HTTP server that accepts
`vllm serve --config FILE` and answers /health) replaces vLLM ONLY because no
GPU exists on this machine: what is under test is sparkguard's part - the
rendered units and configs, the restart policy, the oom_score_adj, the secret
env file, and that serving follows sparkguard-training.target (shrink: restart
with NAME.shared.yaml; stop: stopped while training) - not vLLM itself.

Own node: bookworm on 127.0.80.x, booted and torn down by this module.
"""

from __future__ import annotations

import json
import os

import pytest

from sparkguard.domain.memory.victim_order import SERVING_ADJ
from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.sandbox.conftest import booted_sandbox, net, wait_for
from tests.sandbox.test_earlyoom import host_can_lower_oom_score_adj

VNET = net("127.0.80")

NODE = "node-1"
TOKEN_ENV = "SPARKGUARD_TEST_HF_TOKEN"
TOKEN = "hf_sandboxTOKEN0123456789"
UNIT = "sparkguard-vllm@alpha.service"
TARGET = "sparkguard-training.target"

STANDIN = r'''#!/usr/bin/python3
"""STAND-IN for `vllm serve --config FILE` (sparkguard sandbox test; no GPU here)."""
import http.server, json, os, sys
assert sys.argv[1:2] == ["serve"] and sys.argv[2] == "--config", sys.argv
path = sys.argv[3]
conf = {}
for line in open(path):
    if ":" in line and not line.startswith("#"):
        key, _, value = line.partition(":")
        conf[key.strip()] = value.strip()
info = {"config": path, "kv": int(conf["kv-cache-memory-bytes"]), "pid": os.getpid(),
        "hf_token": os.environ.get("HF_TOKEN") == "%s"}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(info).encode() if self.path == "/standin" else b"ok"
        self.send_response(200 if self.path in ("/health", "/standin") else 404)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print("stand-in vllm serving", path, flush=True)
http.server.HTTPServer((conf["host"], int(conf["port"])), H).serve_forever()
''' % TOKEN  # noqa: UP031 - the stand-in is Python full of braces


ALPHA = ("alpha: {model: standin/alpha, weights_gib: 1, kv_cache_gib: 2, shared_kv_cache_gib: 0.5,"
         " runtime_overhead_gib: 0.5, port: 18580}")
BETA = ("beta: {model: standin/beta, weights_gib: 1, kv_cache_gib: 1, shared_kv_cache_gib: 0.5,"
        " runtime_overhead_gib: 0.5, port: 18581}")


def settings(policy: str, models: tuple[str, ...] = (ALPHA,)) -> str:
    listed = "".join(f"\n        {model}" for model in models) if models else " {}"
    return f"""\
    earlyoom: {{enabled: false}}
    swap: {{enabled: false}}
    monitoring: {{enabled: false}}
    budget: {{os_reserve_gib: 1}}
    vllm:
      runtime: native
      native_binary: /opt/standin/vllm
      cuda_total_gib: 16
      listen: {VNET}.1
      during_training: {policy}
      hf_token_env: {TOKEN_ENV}
      models:{listed}
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    os.environ[TOKEN_ENV] = TOKEN
    try:
        with booted_sandbox(tmp_path_factory, "bookworm", VNET, 1) as handle:
            rc, _, err = handle.ssh(NODE, "mkdir -p /opt/standin && cat > /opt/standin/vllm <<'EOF'\n"
                                          f"{STANDIN}EOF\nchmod 0755 /opt/standin/vllm")
            assert rc == 0, err
            handle.shrink = handle.inventory_with(tmp_path_factory.mktemp("vllm-shrink"), settings("shrink"))
            handle.stop = handle.inventory_with(tmp_path_factory.mktemp("vllm-stop"), settings("stop"))
            yield handle
    finally:
        os.environ.pop(TOKEN_ENV, None)


def apply(inventory_dir):
    return run_deploy(load_inventory(inventory_dir), site_deploy)


def sh(node, command: str) -> str:
    rc, out, err = node.ssh(NODE, command)
    assert rc == 0, (command, out, err)
    return out.strip()


def standin(node) -> dict | None:
    """What the running server reports (config file, KV bytes, pid), or None while it is down."""
    rc, out, _ = node.ssh(NODE, "python3 -c \"import urllib.request as u; "
                                f"print(u.urlopen('http://{VNET}.1:18580/standin', timeout=2).read().decode())\"")
    return json.loads(out) if rc == 0 else None


def live_serving_adj() -> str:
    """Serving's adj as a node can apply it: lowering needs CAP_SYS_RESOURCE, which some hosts' nodes lack
    (systemd then leaves the value as it was, "assuming containerized execution")."""
    return str(SERVING_ADJ) if host_can_lower_oom_score_adj() else "0"


def main_pid(node) -> int:
    return int(sh(node, f"systemctl show -p MainPID --value {UNIT}"))


def test_apply_starts_the_server_with_budget_sizes_and_second_apply_is_clean(node):
    first = apply(node.shrink)
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    assert TOKEN not in json.dumps(first.as_dict())
    second = apply(node.shrink)
    assert second.ok and second.changed == 0, [h.changed_names for h in second.hosts]

    info = wait_for(lambda: standin(node), what="the server's /health")
    assert info["config"] == "/etc/sparkguard/vllm/alpha.yaml"
    assert info["kv"] == 2 * 2**30                      # kv-cache-memory-bytes from the budget
    assert info["hf_token"] is True                      # the env file reached the process
    assert sh(node, f"systemctl is-active {UNIT}; systemctl is-enabled {UNIT}").split() == ["active", "enabled"]
    # Serving ranks below everything unmarked (0): a new GPU process outranks it from its first instant.
    assert sh(node, f"systemctl show -p OOMScoreAdjust --value {UNIT}") == str(SERVING_ADJ)
    # A node can lower a value only with CAP_SYS_RESOURCE; where this host's bounding set lacks it, systemd
    # leaves the value as it was ("assuming containerized execution"), as on any container.
    assert sh(node, f"cat /proc/{main_pid(node)}/oom_score_adj") == live_serving_adj()
    # The token: 0600 root on the node, never in a render.
    assert sh(node, "stat -c '%a %U' /etc/sparkguard/vllm/alpha.env") == "600 root"
    assert f"HF_TOKEN={TOKEN}" in sh(node, "cat /etc/sparkguard/vllm/alpha.env")
    config = sh(node, "cat /etc/sparkguard/vllm/alpha.yaml")
    assert "gpu-memory-utilization: 0.22" in config    # (1 + 2 + 0.5) / 16 rounded up to 0.01


def test_rendered_units_pass_systemd_analyze_verify(node):
    apply(node.shrink)
    rc, out, err = node.ssh(NODE, f"systemd-analyze verify {UNIT} sparkguard-vllm-training@alpha.service {TARGET}")
    assert rc == 0, out + err
    assert "sparkguard" not in err, err   # no warnings about our units either


def test_restarts_after_a_crash(node):
    apply(node.shrink)
    wait_for(lambda: standin(node), what="the server")
    before = main_pid(node)
    sh(node, f"kill -9 {before}")
    wait_for(lambda: (p := main_pid(node)) and p != before and standin(node), timeout=30, what="the restart")
    assert sh(node, f"systemctl is-active {UNIT}") == "active"
    assert sh(node, f"cat /proc/{main_pid(node)}/oom_score_adj") == live_serving_adj()


def test_shrink_follows_the_training_target(node):
    apply(node.shrink)
    full = wait_for(lambda: standin(node), what="the full server")
    sh(node, f"systemctl start {TARGET}")
    # `systemctl start` returns once the full-size server has exited and the shared one is started.
    shared = wait_for(lambda: (i := standin(node)) and i["pid"] != full["pid"] and i, what="the shared server")
    assert shared["config"] == "/etc/sparkguard/vllm/alpha.shared.yaml" and shared["kv"] == 2**29
    assert sh(node, f"cat /proc/{main_pid(node)}/oom_score_adj") == live_serving_adj()
    # An apply during training keeps the shared size (no change, no restart to full).
    assert apply(node.shrink).changed == 0
    assert standin(node)["config"].endswith("alpha.shared.yaml")

    sh(node, f"systemctl stop {TARGET}")
    back = wait_for(lambda: (i := standin(node)) and i["config"].endswith("alpha.yaml") and i,
                    what="the full-size server after training")
    assert back["kv"] == 2 * 2**30
    assert sh(node, f"systemctl is-active {TARGET} || true") == "inactive"


def test_stop_policy_stops_serving_for_the_length_of_training(node):
    result = apply(node.stop)
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    assert apply(node.stop).changed == 0
    wait_for(lambda: standin(node), what="the server")
    sh(node, f"systemctl start {TARGET}")
    assert sh(node, f"systemctl is-active {UNIT} || true") == "inactive"
    assert standin(node) is None
    sh(node, f"systemctl stop {TARGET}")
    info = wait_for(lambda: standin(node), what="serving after training")
    assert info["config"] == "/etc/sparkguard/vllm/alpha.yaml"
    assert sh(node, f"systemctl is-active {UNIT}") == "active"


PREFLIGHT = ("avail=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo); "
             # 0.75 GiB more than is available now: only what the shrink frees (1.5 GiB of KV) makes it fit.
             "peak=$(python3 -c \"print(($avail * 1024 + 0.75 * 2**30) / 2**30)\"); "
             "sparkguard-train --peak-gib $peak --name preflight -- true")


@pytest.mark.replay  # asks for MemAvailable + 0.75 GiB: memory freed or taken meanwhile by another test changes the answer
def test_preflight_counts_what_entering_training_mode_frees(node, tmp_path):
    """The planner's budget says alpha shrinks from 2 to 0.5 GiB of KV: the launcher's preflight counts it."""
    inventory = node.inventory_with(tmp_path / "preflight",
                                    settings("shrink").replace("swap: {enabled: false}", "swap: {enabled: true}"))
    result = apply(inventory)
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    wait_for(lambda: standin(node), what="the full-size server")
    rc, _, err = node.ssh(NODE, PREFLIGHT)
    assert rc == 0, err
    assert "that training mode frees (alpha 1.5 GiB)" in err
    assert sh(node, f"systemctl is-active {TARGET} || true") == "inactive"
    # Already in training mode (the server is shrunk): nothing more to free, the same job is refused.
    sh(node, f"systemctl start {TARGET}")
    try:
        rc, _, err = node.ssh(NODE, PREFLIGHT)
        assert rc == 75 and "refused" in err and "training mode frees" not in err, err
    finally:
        sh(node, f"systemctl stop {TARGET}")
    assert apply(node.shrink).ok


def test_removed_instances_and_policies_leave_nothing_behind(node, tmp_path):
    """Delete a model: its server stops and its files go. Policy `keep`: no drop-in stops serving any more."""
    both = node.inventory_with(tmp_path / "both", settings("stop", (ALPHA, BETA)))
    assert apply(both).ok
    wait_for(lambda: sh(node, "systemctl is-active sparkguard-vllm@beta.service || true") == "active",
             what="beta serving")
    assert "50-sparkguard-vllm-beta.conf" in sh(node, f"ls /etc/systemd/system/{TARGET}.d")

    alpha_keep = node.inventory_with(tmp_path / "alpha-keep", settings("keep"))
    first = apply(alpha_keep)
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    assert sh(node, "systemctl is-active sparkguard-vllm@beta.service || true") != "active"
    assert sh(node, "systemctl is-enabled sparkguard-vllm@beta.service || true") != "enabled"
    assert sh(node, "ls /etc/sparkguard/vllm").split() == ["alpha.env", "alpha.yaml"]
    assert sh(node, f"ls /etc/systemd/system/{TARGET}.d 2>/dev/null | grep vllm || true") == ""
    # Nothing links serving to training any more (the drop-ins were the only link).
    assert sh(node, "ls /usr/local/lib/sparkguard/vllm-mode /etc/systemd/system/sparkguard-vllm-training@.service"
                    f" /usr/local/lib/systemd/system/{TARGET} 2>/dev/null || true") == ""
    assert sh(node, f"systemctl is-active {UNIT}") == "active"
    assert apply(alpha_keep).changed == 0

    none = node.inventory_with(tmp_path / "none", settings("keep", ()))
    assert apply(none).ok
    assert sh(node, f"systemctl is-active {UNIT} || true") != "active"
    assert sh(node, "ls /etc/sparkguard/vllm") == ""
    assert apply(none).changed == 0
    apply(node.stop)  # back to what the other tests in this module expect
