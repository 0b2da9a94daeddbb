"""Jinja2 rendering for role templates.

StrictUndefined: a template that mentions a setting the role did not pass is a
bug to catch in the golden-render tests, not an empty string on a node.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jinja2

from .paths import TEMPLATES_DIR


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["to_json"] = lambda value: json.dumps(value, indent=2, sort_keys=True)
    return env


def render_template(name: str, **context: Any) -> str:
    """Render ``templates/<name>``; the header comment comes from the template."""
    return _environment().get_template(name).render(**context)


def sandbox(writable: tuple[str, ...], caps: str, devices: bool = False) -> str:
    """The [Service] sandbox of one of sparkguard's own root services (templates/base/sandbox.conf.j2).

    One block for every role's helper units, so their confinement cannot drift apart; each unit's
    exposure is held by tests/unit/test_unit_security.py against docs/security.md.
    """
    return render_template("base/sandbox.conf.j2", writable=writable, caps=caps, devices=devices)
