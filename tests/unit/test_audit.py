"""sparkguard audit, offline: one probe script per host, and the comparison of what it prints."""

from __future__ import annotations

import hashlib

from sparkguard.audit.judge import evaluate
from sparkguard.audit.probe import build_probe
from sparkguard.engine.probe import parse_output
from sparkguard.engine.render import host_states
from sparkguard.inventory.loader import load_inventory
from tests.conftest import REPO


def example():
    entry = load_inventory(REPO / "inventory" / "example").host("spark-01")
    return entry, host_states(entry)


def test_probe_covers_every_managed_file_and_only_reads():
    entry, states = example()
    script = build_probe(entry, states)
    for state in states:
        for managed in state.files:
            assert managed.path in script
    for verb in ("rm ", "systemctl restart", "systemctl start", "modprobe", "sysctl -w", "> /etc"):
        assert verb not in script, verb


def green_output(entry, states) -> str:
    lines = ["memtotal_kb=127607603", "gpu_name=NVIDIA GB10", "cgroup2=1", "container=none",
             "earlyoom_version=earlyoom v1.7"]
    for state in states:
        lines += [f"@@P\t{p}\tinstalled" for p in state.packages]
        for m in state.files:
            sha = hashlib.sha256(m.content.encode()).hexdigest()
            lines.append(f"@@F\t{m.path}\t{int(m.mode, 8):o}:{m.owner}:{m.group}\t{sha}")
        for s in state.services:   # one `systemctl is-enabled` per unit, one `is-active` for the batch
            lines.append(f"@@E\t{s.name}\t{'masked' if s.masked else 'enabled'}")
            lines.append(f"@@SN\t{s.name}")
            lines.append(f"@@SA\t{'active' if s.running else 'inactive'}")
        lines += [f"@@K\t{k}\t{v}" for k, v in state.sysctls.items()]
        lines += [f"@@C\t{state.role}.{i}\tyes" for i, _ in enumerate(state.ensures)]
    return "\n".join(lines)


def test_drifted_file_and_missing_service_are_named():
    entry, states = example()
    text = green_output(entry, states).replace("@@SN\tearlyoom.service\n@@SA\tactive",
                                               "@@SN\tearlyoom.service\n@@SA\tfailed")
    text = "\n".join(line if not line.startswith("@@F\t/etc/default/earlyoom") else
                     "@@F\t/etc/default/earlyoom\t644:root:root\t" + "0" * 64 for line in text.splitlines())
    checks = {c.name: c for c in evaluate(entry, states, parse_output(text))}
    assert not checks["earlyoom: files"].ok and "/etc/default/earlyoom differs" in checks["earlyoom: files"].actual
    assert not checks["earlyoom: services"].ok and "earlyoom.service failed" in checks["earlyoom: services"].actual
    assert checks["base: files"].ok


def test_earlyoom_18_on_unified_memory_is_not_ok_and_ssh_trap_is_caught():
    entry, states = example()
    text = green_output(entry, states).replace("earlyoom v1.7", "earlyoom v1.8.2")
    text += "\n@@R\tssh_listener_pid\t100\n@@R\tssh_listener_adj\t-1000\n@@R\tsession_adj\t-1000\n@@R\tssh_unit_adj\t-1000"
    checks = {c.name: c for c in evaluate(entry, states, parse_output(text))}
    assert not checks["earlyoom: thresholds hold on unified memory"].ok
    assert checks["sshd: listener oom_score_adj"].ok
    assert not checks["sshd: fresh session oom_score_adj"].ok
    assert not checks["sshd: ssh.service OOMScoreAdjust"].ok


def test_listener_at_zero_is_ok_only_where_the_kernel_refuses_lowering():
    entry, states = example()
    base = green_output(entry, states) + "\n@@R\tssh_listener_pid\t100\n@@R\tssh_listener_adj\t0\n@@R\tsession_adj\t0"
    refused = {c.name: c for c in evaluate(entry, states, parse_output(base + "\n@@R\tcan_lower\t0"))}
    allowed = {c.name: c for c in evaluate(entry, states, parse_output(base + "\n@@R\tcan_lower\t1"))}
    assert refused["sshd: listener oom_score_adj"].ok and "kernel refused" in refused["sshd: listener oom_score_adj"].actual
    assert not allowed["sshd: listener oom_score_adj"].ok


def _ranking_status(state: str, time_s: int, detail: str = "d", holders=()) -> str:
    import json

    return json.dumps({"state": state, "detail": detail, "time": time_s, "interval_s": 2.0,
                       "holders": list(holders)})


def test_gpu_ranking_verdict_table():
    from sparkguard.roles.earlyoom.audit import gpu_ranking_verdict

    holder = {"pid": 4242, "comm": "python3", "class": "gpu-holder", "adj": 732}
    rows = [
        (_ranking_status("ok", 1000, "1 GPU-memory holder(s)", [holder]), "1005", True, "python3 4242 (gpu-holder, adj 732)"),
        (_ranking_status("no-nvidia-smi", 1000, "no nvidia-smi on this node"), "1001", True, "no nvidia-smi"),
        (_ranking_status("error", 1000, "nvidia-smi exited 9"), "1001", False, "earlyoom's name rules only"),
        (_ranking_status("ok", 1000), "1031", False, "31 s old"),
        ("", "1000", False, "not running"),
        ("{not json", "1000", False, "not running"),
        (_ranking_status("ok", 1000), "", False, "not running"),
    ]
    for raw, clock, ok, words in rows:
        verdict, actual = gpu_ranking_verdict(raw, clock)
        assert (verdict, words in actual) == (ok, True), (raw, clock, actual)


def test_files_and_instances_the_inventory_dropped_are_named():
    from sparkguard.audit.judge import _left_behind
    from sparkguard.engine.probe import absent_files_key, absent_units_key

    entry, states = example()
    vllm = next(s for s in states if s.role == "vllm")
    files, units = absent_files_key(vllm, 0), absent_units_key(vllm, 0)
    runtime = {files: "/etc/sparkguard/vllm/llama-8b.yaml /etc/sparkguard/vllm/old.yaml",
               units: "sparkguard-vllm@llama-8b.service sparkguard-vllm@old.service"}
    assert _left_behind(vllm, runtime) == ["/etc/sparkguard/vllm/old.yaml", "sparkguard-vllm@old.service"]
    assert _left_behind(vllm, {files: "/etc/sparkguard/vllm/llama-8b.yaml"}) == []
