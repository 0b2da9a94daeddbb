"""The one way a sparkguard setting is declared.

Each role keeps its settings in a single ``Settings`` class: type, default,
unit and one line of documentation per field, the geerlingguy "defaults in one
place" rule. Docs (``sparkguard docs``) and validation are generated from it, so
nothing is written twice.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.config import JsonDict

from .errors import Problem, redact_urls, url_has_credentials

SECRET_PLACEHOLDER = "<secret>"


def setting(default: Any, doc: str, unit: str | None = None, secret: bool = False, operator_file: str | None = None,
            **constraints: Any) -> Any:
    """Declare a setting.

    ``operator_file=KIND`` (a kind of sparkguard.inventory.operator_files.KINDS) marks a path ON THE OPERATOR'S MACHINE:
    the inventory loader checks the file it names (regular file, size cap, content of that kind) on every command.

    Example::

        term_percent: float = setting(8.0, "SIGTERM below this much available memory.",
                                      unit="% of MemTotal", gt=0, le=50)
    """
    if operator_file:
        from .inventory.operator_files import KINDS

        if operator_file not in KINDS:
            raise ValueError(f"operator_file={operator_file!r}: not one of {', '.join(KINDS)}")
    extra: JsonDict | None = {**({"unit": unit} if unit else {}), **({"secret": True} if secret else {}),
                              **({"operator_file": operator_file} if operator_file else {})} or None
    if callable(default) and not isinstance(default, type):
        return Field(default_factory=default, description=doc, json_schema_extra=extra, **constraints)
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


def is_secret(info: Any) -> bool:
    extra = getattr(info, "json_schema_extra", None)
    return isinstance(extra, dict) and bool(extra.get("secret"))


def masked_dump(model: BaseModel, **dump: Any) -> dict[str, Any]:
    """``model_dump(mode="json")`` with every secret setting (``secret=True``) that is set replaced by a placeholder.

    Whatever the node or a reviewer can read (node.json, renders, --json, errors) carries the
    placeholder; only the one file that needs the secret gets the value.
    """
    data = model.model_dump(mode="json", **dump)
    _mask(model, data)
    return data


def _mask(model: BaseModel, data: dict[str, Any]) -> None:
    for name, info in type(model).model_fields.items():
        if name not in data:
            continue
        value = getattr(model, name)
        if is_secret(info) and data[name]:
            data[name] = SECRET_PLACEHOLDER
        elif isinstance(value, BaseModel) and isinstance(data[name], dict):
            _mask(value, data[name])
        elif isinstance(value, dict) and isinstance(data[name], dict):
            for key, item in value.items():
                if isinstance(item, BaseModel) and isinstance(data[name].get(key), dict):
                    _mask(item, data[name][key])


CREDENTIALS_IN_URL = (
    "credentials in the URL (shown as <redacted>): a setting is written in clear to files on the node, node.json,"
    " renders and the Ansible export. Drop the user:password@ part: sparkguard's own endpoints get basic auth from"
    " monitoring.web (the password read on the operator's machine); a service of yours, through a proxy that adds it")


def url_credential_problems(host: str, model: BaseModel, prefix: str = "") -> list[Problem]:
    """Every string of a non-secret setting (at any depth: tuples, blocks, option maps) holding a URL with
    ``user:password@``: refused, shown redacted. A secret setting (``secret=True``, a webhook URL) is a credential
    already: only its one file holds it, everything else shows <secret>."""
    found: list[Problem] = []
    for name, info in type(model).model_fields.items():
        if not is_secret(info):
            _credential_urls(host, getattr(model, name), f"{prefix}{name}", found)
    return found


def _credential_urls(host: str, value: Any, dotted: str, found: list[Problem]) -> None:
    if isinstance(value, BaseModel):
        found.extend(url_credential_problems(host, value, dotted + "."))
    elif isinstance(value, str) and url_has_credentials(value):
        found.append(Problem(host, dotted, redact_urls(value), CREDENTIALS_IN_URL))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _credential_urls(host, item, f"{dotted}[{index}]", found)
    elif isinstance(value, dict):
        for key, item in value.items():
            _credential_urls(host, item, f"{dotted}.{key}", found)


def required(doc: str, unit: str | None = None, **constraints: Any) -> Any:
    """Declare a setting that has no sensible default (an address, say)."""
    extra: JsonDict | None = {"unit": unit} if unit else None
    return Field(..., description=doc, json_schema_extra=extra, **constraints)


class Settings(BaseModel):
    """Base for every settings block: unknown keys are typos, not extensions."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# ---------------------------------------------------------------- string kinds
# Every string setting that reaches a unit file, a shell script, a command line or a path on
# the node is one of these kinds, declared on the field (one place). The patterns admit no
# whitespace, no newline or NUL, no quote, backslash, backtick, `$`, `;`, `&`, `<` or `>`: a value
# can never add a directive, a word or a command wherever it is written. Free text (Text) only
# ever lands in JSON or YAML, encoded. tests/unit/test_hostile_values.py sends metacharacters
# through every string setting.


KIND_LABELS: dict[str, str] = {}
"""pattern -> what it admits, in words (the settings reference shows this instead of the regex)."""


def _kind(pattern: str, max_length: int = 255, label: str = "") -> Any:
    KIND_LABELS[pattern] = label
    return Annotated[str, StringConstraints(pattern=pattern, max_length=max_length)]


NodePath = _kind(r"^(/[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*)+$", 4096,
                 "an absolute path on the node (letters, digits, _ + @ - . ; no . or .. or hidden parts)")
"""An absolute path on the node: no '.' or '..' component, no hidden component, no '/' alone."""
ImageRef = _kind(r"^[a-z0-9][a-z0-9.-]*(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]*)*"
                 r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?$",
                 label="an image reference [registry[:port]/]name[:tag][@sha256:digest]")
"""A container image reference: [registry[:port]/]name[:tag][@sha256:digest]."""
HostName = _kind(r"^([A-Za-z0-9][A-Za-z0-9.-]*|[0-9A-Fa-f:.]+)$", 253, "a DNS name or an IP address")
"""A DNS name or an IPv4/IPv6 address."""
Duration = _kind(r"^([0-9]+(ms|s|m|h|d|w|y))+$", 32, "a duration such as 15s, 30d, 1h30m")
"""A Prometheus duration such as 15s, 30d or 1h30m."""
ByteSize = _kind(r"^[0-9]+(B|KB|MB|GB|TB|PB|EB)$", 32, "a size such as 10GB")
"""A Prometheus byte size such as 10GB."""
Word = _kind(r"^[A-Za-z0-9_][A-Za-z0-9_.@+-]*$", 64, "a name (letters, digits, _ . @ + -)")
"""A name: a user, a metric set, an option."""
UnitPattern = _kind(r"^[A-Za-z0-9_.*+?@:|()\[\]^-]+$", 128,
                    "a unit-name regex (letters, digits, _ . * + ? @ : ( ) [ ] ^ - and alternation)")
"""An RE2 fragment matching systemd unit names."""
ModelRef = _kind(r"^(([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*|(/[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*)+)$",
                    label="a Hugging Face repo id (org/name) or an absolute path on the node")
"""A Hugging Face repo id (org/name) or an absolute path on the node."""
Text = _kind(r"^[^\x00-\x1f\x7f]*$", 500, "one line of text (no control characters)")
"""Free text on one line (no control characters); only ever written JSON- or YAML-encoded."""
