"""How `sparkguard audit` judges role vllm: the node's server configs against the budgeted ones (none extra)."""

from __future__ import annotations

from sparkguard.audit.checks import AuditView, Check, file_problem, q, short
from sparkguard.hostconfig import HostConfig

from .state import VLLM_CONFIG_DIR


def probe(config: HostConfig) -> list[str]:
    return [f"for y in {q(VLLM_CONFIG_DIR)}/*.yaml; do [ -e \"$y\" ] && f @@V \"$y\"; done"]


def checks(view: AuditView) -> list[Check]:
    files = view.state.files if view.state is not None else ()
    desired = {m.path: m for m in files if m.path.startswith(VLLM_CONFIG_DIR + "/") and m.path.endswith(".yaml")}
    problems = [p for m in desired.values() if (p := file_problem(m, view.probe.found_files.get(m.path)))]
    problems += [f"{p} not from the budget" for p in sorted(set(view.probe.found_files) - set(desired))]
    return [Check("vllm: configs vs budget", not problems, f"{len(desired)} budgeted configs",
                  short(problems) if problems else "match the budget")]
