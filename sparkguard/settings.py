"""The one way a sparkguard setting is declared.

Each role keeps its settings in a single ``Settings`` class: type, default,
unit and one line of documentation per field, the geerlingguy "defaults in one
place" rule. Docs (``sparkguard docs``) and validation are generated from it, so
nothing is written twice.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def setting(default: Any, doc: str, unit: str | None = None, **constraints: Any) -> Any:
    """Declare a setting.

    Example::

        term_percent: float = setting(8.0, "SIGTERM below this much available memory.",
                                      unit="% of MemTotal", gt=0, le=50)
    """
    extra = {"unit": unit} if unit else None
    if callable(default) and not isinstance(default, type):
        return Field(default_factory=default, description=doc, json_schema_extra=extra, **constraints)
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


def required(doc: str, unit: str | None = None, **constraints: Any) -> Any:
    """Declare a setting that has no sensible default (an address, say)."""
    extra = {"unit": unit} if unit else None
    return Field(..., description=doc, json_schema_extra=extra, **constraints)


class Settings(BaseModel):
    """Base for every settings block: unknown keys are typos, not extensions."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
