"""Errors an operator can act on, printed as one paragraph each.

Every message names where the bad value came from (file, host, dotted field),
the value itself and what would have been accepted, so the fix is obvious
without reading a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Exit codes: one meaning each, the same in every command (README.md, "Exit codes", is the operator's table).
EXIT_OK = 0
EXIT_FAILED = 1          # it ran, and something failed on a node (an apply's operation, an audit's check)
EXIT_CONFIG_ERROR = 2    # the input cannot be used (usage, inventory, settings, an output path): nothing ran
EXIT_DOES_NOT_FIT = 3    # the input is valid but a host's memory plan does not fit: nothing ran
EXIT_UNREACHABLE = 4     # a node could not be reached, or another apply held it: nothing was applied
EXIT_INTERRUPTED = 130   # Ctrl-C
EXIT_BROKEN_PIPE = 141   # the reader of stdout went away (as a shell reports SIGPIPE)

# Problem kinds: a value that is not allowed, or a valid budget that does not fit.
INPUT = "input"
DOES_NOT_FIT = "does-not-fit"
SECRET_SHOWN = "<secret>"

# ------------------------------------------------------------------ what an error never shows
# A value under a secret-looking name is shown as <secret>, and the user:password@ of a URL as <redacted>,
# wherever a paragraph is printed: whatever check made the problem, and whatever file the value came from.

_SECRET_WORDS = frozenset({"password", "passwd", "passphrase", "secret", "secrets", "token", "apikey", "credential",
                           "credentials", "cookie", "authorization", "bearer"})
_SECRET_ENDINGS = ("token", "password", "passwd", "secret", "apikey")
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "key"),
                           ("session", "key"), ("signing", "key"), ("encryption", "key"), ("client", "secret")})
# A name ending so names WHERE a secret is (an environment variable, a file), not the secret.
_POINTER_WORDS = frozenset({"env", "file", "path", "dir"})
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s@]*@")


def option_name(name: object) -> str:
    """An option or key name as matched against a list: lower case, ``_`` -> ``-``, leading dashes stripped
    (``--API_Key`` -> ``api-key``)."""
    return str(name).strip().lower().replace("_", "-").lstrip("-")


def secret_looking(name: object) -> bool:
    """Whether a key or field name looks like it holds a secret (``hf_token``, ``--api-key``, ``Password``)."""
    words = [w for w in re.split(r"[^a-z0-9]+", option_name(name)) if w]
    if not words or words[-1] in _POINTER_WORDS:
        return False
    return (any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)
            or any(pair in _SECRET_PAIRS for pair in zip(words, words[1:], strict=False)))


def url_has_credentials(text: str) -> bool:
    """Whether ``text`` holds a URL with a user (and maybe a password) before its host: ``https://u:p@host``."""
    return bool(_URL_USERINFO.search(text))


def redact_urls(text: str) -> str:
    """``text`` with every URL's ``user:password@`` replaced by ``<redacted>@``."""
    return _URL_USERINFO.sub(r"\1<redacted>@", text)


def redact_userinfo(url: str) -> str:
    """A URL-typed setting as an error shows it: whatever precedes an ``@`` in its authority (the part before the
    first ``/`` after an optional ``scheme://``) becomes ``<redacted>``, with or without a scheme."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    return f"{scheme}{sep}<redacted>@{authority.rpartition('@')[2]}{slash}{path}"


def shown_value(field: str, value: Any) -> Any:
    """``value`` as an error may show it under ``field``: secret-looking names masked (also as keys of a mapping,
    at any depth), credentials in URLs redacted."""
    last = re.sub(r"\[[^\]]*\]$", "", field.rsplit(".", 1)[-1]) if field else ""
    if last and secret_looking(last) and value is not None and not isinstance(value, bool):
        return SECRET_SHOWN
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, dict):
        return {k: shown_value(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(shown_value("", v) for v in value)
    return value


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one host's settings."""

    host: str
    field: str
    value: Any
    allowed: str
    source: str = ""
    kind: str = INPUT  # INPUT or DOES_NOT_FIT: which exit code a refusal made of it gets

    def as_dict(self) -> dict[str, Any]:
        """The problem for --json: the value as a paragraph would show it (secrets masked, URLs redacted)."""
        return {"host": self.host or None, "field": self.field or None, "source": self.source or None,
                "value": None if self.value is _MISSING else shown_value(self.field, self.value),
                "allowed": redact_urls(self.allowed), "kind": self.kind}

    def paragraph(self) -> str:
        where = f"{self.source}: " if self.source else ""
        host = f"host '{self.host}'" if self.host else "inventory"
        field = f", field '{self.field}'" if self.field else ""
        value = f" = {shown_value(self.field, self.value)!r}" if self.value is not _MISSING else ""
        return f"{where}{host}{field}{value}: {redact_urls(self.allowed)}"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
MISSING = _MISSING


class SparkguardError(Exception):
    """An error meant for the operator: printed without a traceback."""

    exit_code = EXIT_FAILED
    kind = "failed"  # the error's name in --json

    def paragraphs(self) -> list[str]:
        return [str(self)]

    def as_dict(self) -> dict[str, Any]:
        """The error for --json (commands print it on stdout, so a script always has a document to read)."""
        return {"error": self.kind, "exit_code": self.exit_code,
                "message": [redact_urls(paragraph) for paragraph in self.paragraphs()]}


class ConfigError(SparkguardError):
    """The inventory cannot be used (exit 2), or it is valid and a host does not fit (exit 3): nothing ran."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        fits_only = bool(problems) and all(p.kind == DOES_NOT_FIT for p in problems)
        self.exit_code = EXIT_DOES_NOT_FIT if fits_only else EXIT_CONFIG_ERROR
        self.kind = DOES_NOT_FIT if fits_only else "invalid-input"
        super().__init__("\n\n".join(p.paragraph() for p in problems))

    def paragraphs(self) -> list[str]:
        return [p.paragraph() for p in self.problems]

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "problems": [p.as_dict() for p in self.problems]}


class NodeBusyError(SparkguardError):
    """A node's apply lock could not be taken (another apply holds it, or sudo refused); nothing was applied."""

    exit_code = EXIT_UNREACHABLE
    kind = "busy"


class ConnectError(SparkguardError):
    """A node could not be reached; nothing was applied to any node."""

    exit_code = EXIT_UNREACHABLE
    kind = "unreachable"

    def __init__(self, message: str, hosts: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.hosts = hosts  # the hosts that could not be reached, for a retry file

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "unreachable": list(self.hosts)}
