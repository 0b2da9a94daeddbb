"""How `sparkguard audit` judges role swap: the policy against the swap that is active now."""

from __future__ import annotations

from typing import Any

from sparkguard.audit.checks import AuditView, Check

from ..base.interface import TRAINING_TARGET

EXPECTED = {"off": "no swap, none at boot", "on": "fstab swap active", "training-off": "distro swap; none while training"}


def probe(config: Any) -> list[str]:
    return [f"r training_active \"$(systemctl is-active {TRAINING_TARGET} 2>/dev/null)\""]


def checks(view: AuditView) -> list[Check]:
    active = ", ".join(f"{s.path} ({s.size_kib // 1024} MiB)" for s in view.info.swaps) or "none"
    mode = view.config.swap.mode
    training = view.runtime.get("training_active") == "active"
    return [Check("swap: policy vs actual", view.ensures_hold(), f"{mode}: {EXPECTED[mode]}",
                  f"active: {active}" + (" (training mode)" if training else ""))]
