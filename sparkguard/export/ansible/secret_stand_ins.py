"""Secrets in the Ansible export: stand-ins while the states are built, lookups in their place, or a refusal.

The export never reads a secret. ``secrets.read_secret`` hands out a stand-in for each environment
variable or file a role reads, and each secret setting held in the inventory itself gets one too; the
stand-ins found in a file's content become ``lookup('env', ...)`` / ``lookup('file', ...)`` on the
controller. That is exact only where the secret's text lands in the file as it is: the states are
built twice with different stand-ins and must agree once one family is swapped for the other. A hash
of a secret, an escaped or quoted one, a secret outside a file's content or a secret setting from the
inventory (nothing on the controller to look it up from) is refused, never written.
"""

from __future__ import annotations

import json
import re
import secrets as random_tokens
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from ...engine.render import host_states
from ...errors import Problem
from ...inventory import secrets
from ...inventory.loader import InventoryHost
from ...settings import is_secret
from ...state import DesiredState

Model = TypeVar("Model", bound=BaseModel)


@dataclass
class StandIns:
    """Distinct text for each secret source a role reads, remembered so it can become a lookup.

    Each stand-in is ``<'"ID"'>``: a role that quotes, escapes or hashes a secret (YAML, JSON, a shell
    word, bcrypt) changes the quotes around the ID, or the ID itself, and ``problems`` notices.
    """

    family: str
    nonce: str
    lookups: dict[str, dict[str, str]] = field(default_factory=dict)

    def secret(self, env_name: str | None, file_path: str | None) -> str:
        # A ~ path stays one: lookup('file') expands it on the machine that runs the playbook.
        path = file_path or ""
        lookup = {"env": env_name} if env_name else {"file": path if path.startswith("~") else str(Path(path).absolute())}
        return self._stand_in(lookup)

    def setting(self, dotted: str) -> str:
        """A secret setting whose value is in the inventory: nothing on the controller to look it up from."""
        return self._stand_in({"setting": dotted})

    def ident(self, index: int) -> str:
        return f"sparkguard-{self.nonce}-{self.family}{index}"

    def _stand_in(self, lookup: dict[str, str]) -> str:
        for text, known in self.lookups.items():
            if known == lookup:
                return text
        text = f"<'\"{self.ident(len(self.lookups))}\"'>"
        self.lookups[text] = lookup
        return text

    def found(self, text: str, settings: bool) -> list[str]:
        """What ``text`` holds a trace of (an ID, even quoted): setting names, or the secrets' lookups."""
        return [str(lookup.get("setting", lookup)) for i, lookup in enumerate(self.lookups.values())
                if ("setting" in lookup) == settings and self.ident(i) in text]

    def _forms(self) -> dict[str, dict[str, Any]]:
        """Each stand-in as it may stand in a file: as it is, or as a JSON string (a role that places a
        secret as one, e.g. alertmanager.yml's webhook URL, which the lookup rebuilds with ``| to_json``)."""
        forms: dict[str, dict[str, Any]] = {}
        for text, lookup in self.lookups.items():
            forms[json.dumps(text)] = {**lookup, "json": True}
            forms[text] = dict(lookup)
        return forms

    def parts(self, content: str) -> list[Any] | None:
        """``content`` split at the stand-ins: text and lookups in order; None when there is none."""
        forms = self._forms()
        if not any(text in content for text in forms):
            return None
        pattern = "|".join(re.escape(text) for text in forms)  # the forms never overlap: JSON escapes the quotes
        pieces = re.split(f"({pattern})", content)
        return [dict(forms[p]) if p in forms else p for p in pieces if p]

    def swapped_for(self, other: StandIns, text: str) -> str:
        """``text`` with this family's stand-ins replaced by ``other``'s for the same source (in either form)."""
        by_lookup = {repr(lookup): stand_in for stand_in, lookup in other._forms().items()}
        for stand_in, lookup in self._forms().items():
            text = text.replace(stand_in, by_lookup.get(repr(lookup), stand_in))
        return text


def _with_secret_settings(model: Model, stand_ins: StandIns, prefix: str = "") -> Model:
    """``model`` with every secret setting that is set (a webhook URL) replaced by a stand-in."""
    updates: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        dotted = f"{prefix}{name}"
        if is_secret(info) and isinstance(value, str) and value:
            updates[name] = stand_ins.setting(dotted)
        elif isinstance(value, BaseModel):
            updates[name] = _with_secret_settings(value, stand_ins, dotted + ".")
        elif isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
            updates[name] = {k: _with_secret_settings(v, stand_ins, f"{dotted}.{k}.") if isinstance(v, BaseModel) else v
                             for k, v in value.items()}
    return model.model_copy(update=updates) if updates else model


Traced = tuple[list[DesiredState], StandIns]


def _traced_states(entry: InventoryHost, family: str, nonce: str) -> Traced:
    """The host's desired states with a stand-in wherever a secret would be: nothing secret is read."""
    stand_ins = StandIns(family, nonce)
    config = _with_secret_settings(entry.config, stand_ins)
    with secrets.stand_ins(stand_ins.secret):
        states = host_states(replace(entry, config=config))
    return states, stand_ins


def _strings(a: DesiredState, b: DesiredState) -> list[tuple[str, bool, str, str]]:
    """(where, is a file's content, text in a, text in b) for every file and the rest of the state."""
    if [f.path for f in a.files] != [f.path for f in b.files]:
        return [(f"role {a.role}: its files", False, repr([f.path for f in a.files]), repr([f.path for f in b.files]))]
    pairs = [(f"{a.role}: file {fa.path}", True, fa.content, fb.content) for fa, fb in zip(a.files, b.files, strict=True)]
    rest_a = replace(a, files=tuple(replace(f, content="") for f in a.files))
    rest_b = replace(b, files=tuple(replace(f, content="") for f in b.files))
    return pairs + [(f"role {a.role}: its state", False, repr(rest_a), repr(rest_b))]


def _problem(entry: InventoryHost, where: str, is_content: bool, text_a: str, text_b: str, a: StandIns,
             b: StandIns) -> Problem | None:
    """Why this string cannot be exported as text and lookups, or None."""
    never = "the Ansible export never writes a secret's value: export without that secret, or apply this host with sparkguard"
    held = a.found(text_a, settings=True)
    if held:
        return Problem(entry.name, held[0], "<secret>", f"is a secret held in the inventory and {where} contains it; no "
                                                        f"environment variable or file can give it back; {never}")
    if not is_content and a.found(text_a, settings=False):
        return Problem(entry.name, "ansible export", where, f"uses a secret outside a file's content; {never}")
    if a.swapped_for(b, text_a) != text_b:
        return Problem(entry.name, "ansible export", where, "derives something from a secret (a hash, or the value quoted "
                                                            f"or escaped) that a lookup cannot rebuild; {never}")
    return None


def problems(entry: InventoryHost, a: Traced, b: Traced) -> list[Problem]:
    """Built twice with different stand-ins, every string must match once A's stand-ins are swapped for B's.

    Then each stand-in stands exactly where the secret's text goes, and a lookup rebuilds the file.
    """
    (states_a, ins_a), (states_b, ins_b) = a, b
    if [s.role for s in states_a] != [s.role for s in states_b]:
        return [Problem(entry.name, "ansible export", None, "a secret changes which roles apply; cannot export")]
    found = (_problem(entry, *strings, ins_a, ins_b) for sa, sb in zip(states_a, states_b, strict=True)
             for strings in _strings(sa, sb))
    return [p for p in found if p is not None]


def traced(entry: InventoryHost) -> tuple[Traced, list[Problem]]:
    """The host's states with stand-ins (family A), and why a lookup could not rebuild what they hold."""
    nonce = random_tokens.token_hex(8)
    a, b = _traced_states(entry, "a", nonce), _traced_states(entry, "b", nonce)
    return a, problems(entry, a, b)
