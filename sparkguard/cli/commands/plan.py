"""sparkguard plan INVENTORY: the memory budget of every host, before anything starts (no SSH)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ...domain.memory.planner import GIB, HostPlan, budget_problems, plan_document
from ...errors import EXIT_DOES_NOT_FIT, ConfigError, Problem
from ...hostconfig import HostConfig
from ...inventory.loader import load_inventory
from ...registry import roles
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("plan", help="memory budget per host: earlyoom line, OS, vLLM, training, headroom")
    parser.add_argument("inventory", help="inventory directory, its hosts.yml or its inventory.py")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def plan_host(host: str, config: HostConfig) -> HostPlan:
    """The host's budget, from the role that provides it (``Role.plan``; role budget among the built-in ones)."""
    planner = next((role.plan for role in roles() if role.plan is not None), None)
    if planner is None:
        raise ConfigError([Problem(host, "roles", None, "no registered role provides a memory budget (Role.plan)")])
    return planner(host, config)


def run(args: argparse.Namespace) -> int:
    # Load without the role checks: the plan must be shown for an over-committed host too.
    inventory = load_inventory(args.inventory, check_roles=False)
    plans = [plan_host(h.name, h.config) for h in sorted(inventory.hosts, key=lambda h: h.name)]
    input_problems = [p for plan in plans for p in plan.problems]
    if input_problems:
        raise ConfigError([replace(p, host=plan.host) for plan in plans for p in plan.problems])
    if args.json:
        print(json.dumps(plan_document(plans), indent=2, sort_keys=True))
    else:
        for plan in plans:
            print(render_text(plan))
    # Exit 3 (does not fit) like validate when a host does not fit (the JSON/text above still shows the numbers).
    return EXIT_DOES_NOT_FIT if any(plan.fits is False for plan in plans) else 0


def _row(label: str, value: int, note: str = "", indent: int = 2) -> str:
    return f"{' ' * indent}{label:<{48 - indent}}{value / GIB:9.2f}" + (f"   {note}" if note else "")


def render_text(plan: HostPlan) -> str:
    """A plain-text budget table per host (stable: docs/planner.md quotes it)."""
    lines = [f"host {plan.host} ({plan.device_profile})"]
    if plan.memory_total_bytes is None:
        lines.append("  MemTotal not declared: nothing to budget")
        return "\n".join(lines) + "\n"
    lines.append(f"{'':48}{'GiB':>9}")
    lines.append(_row("MemTotal", plan.memory_total_bytes))
    if plan.cuda_total_bytes:
        lines.append(_row("CUDA total (gpu-memory-utilization = 1.0)", plan.cuda_total_bytes))
    if plan.earlyoom_enabled:
        lines.append(_row(f"earlyoom SIGTERM line ({plan.term_percent:g}%)", plan.term_bytes))
        lines.append(_row(f"  (SIGKILL line {plan.kill_percent:g}%, inside it)", plan.kill_bytes))
    else:
        lines.append("  earlyoom disabled: no SIGTERM line budgeted")
    lines.append(_row("OS + services reserve", plan.os_reserve_bytes))
    for s in plan.serving:
        kind = "explicit" if s.explicit_kv else "rest of utilization"
        lines.append(f"  vLLM '{s.name}': {s.model}")
        lines.append(_row(f"weights ({s.weights_source})", s.weights_bytes, indent=4))
        lines.append(_row(f"KV cache ({kind})", s.kv_cache_memory_bytes, indent=4))
        lines.append(_row("runtime (context, activations, CPU side)", s.overhead_bytes, indent=4))
        lines.append(_row("= full size", s.footprint_bytes,
                          f"gpu-memory-utilization {s.gpu_memory_utilization:.2f}, max-model-len "
                          f"{s.max_model_len:,}, max-num-seqs {s.max_num_seqs}", indent=4))
        if plan.training is not None:
            during = s.during_training_bytes(plan.during_training)
            note = {"shrink": f"KV {s.shared_kv_cache_memory_bytes / GIB:.2f} GiB, gpu-memory-utilization "
                              f"{s.shared_gpu_memory_utilization:.2f}"
                    if s.shared_kv_cache_memory_bytes is not None else "",
                    "stop": "", "keep": ""}[plan.during_training]
            label = {"shrink": "shrunk", "stop": "stopped", "keep": "kept at full size"}[plan.during_training]
            lines.append(_row(f"while training ({label})", during, note, indent=4))
    if plan.training is not None:
        t = plan.training
        lines.append(f"  training {t.describe()}")
        if t.spec is not None:
            lines.append(_row(f"estimated peak (set by the {t.phase})", t.estimate_bytes or 0, indent=4))
            lines.append(_row("trainer CPU side", t.cpu_overhead_bytes, indent=4))
        lines.append(_row("= budgeted peak", t.peak_bytes, indent=4))
    for phase in plan.phases:
        lines.append(_row(f"used, phase {phase.name}", phase.used_bytes,
                          f"headroom {phase.headroom_bytes / GIB:.2f} GiB"))
    headroom = plan.headroom_bytes
    if headroom is None:
        # No phase: an input problem stopped plan_host before the budget. run() refuses such a plan
        # first, but the table must not crash (nor say DOES NOT FIT) for it.
        lines.append("  verdict: not budgeted (an input problem stopped the plan)")
        return "\n".join(lines) + "\n"
    verdict = "FITS" if plan.fits else "DOES NOT FIT"
    lines.append(f"  verdict: {verdict} (headroom {headroom / GIB:.2f} GiB)")
    if budget_problems(plan):
        for i, way in enumerate(plan.ways_out, 1):
            lines.append(f"    way out {i}: {way}")
    return "\n".join(lines) + "\n"
