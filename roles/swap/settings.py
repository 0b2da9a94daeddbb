"""Defaults of role ``swap``: every variable, in one place."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from sparkguard.settings import Settings, setting


class SwapSettings(Settings):
    """Swap policy, and training mode: swap off while a job trains, back however it ends."""

    enabled: bool = setting(True, "Manage swap policy and install sparkguard-train.")
    mode: Literal["off", "on", "training-off"] = setting(
        "training-off",
        "off = no swap now or after reboot (fstab lines commented out with a marker, swap.target and zram"
        " masked); on = the exact reverse; training-off = swap as the distro has it, switched off by"
        " sparkguard-train for the length of a job.")
    swappiness: int = setting(
        10, "vm.swappiness while swap is on: low, so the system does not push sshd and journald out first.",
        ge=0, le=200)
    swapoff_timeout_s: int = setting(
        900, "How long turning swap off may take before training is refused (swapoff moves pages back to RAM).",
        unit="s", ge=10, le=7200)

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        """YAML 1.1 reads an unquoted `mode: off` as false and `on` as true; take them as meant."""
        if value is False:
            return "off"
        if value is True:
            return "on"
        return value
