"""Every string setting, sent metacharacters, newlines and NULs: refused (exit 2), or inert where it lands.

The settings are found from the schema itself (every str / tuple[str, ...] field of every role and
of the connection block), so a new setting is covered the day it is added. For each hostile value:

- the inventory either fails validation with a ConfigError naming the field (what `validate`,
  `render` and `apply` turn into exit 2), never another exception;
- or, if the value is accepted, the render is inspected: the raw value may appear only in JSON or
  YAML files, which must parse and give the value back exactly. In a unit file, a shell script, an
  EnvironmentFile or a config with its own syntax it would be an injection.
"""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from sparkguard.errors import ConfigError
from sparkguard.hostconfig import host_config_model
from sparkguard.inventory import load_inventory
from sparkguard.render import render_inventory
from tests.reporting import report

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "inventory" / "example" / "hosts.yml").read_text())
HOST = EXAMPLE["all"]["children"]["spark"]["hosts"]["spark-01"]
HOSTILE = [
    "x\nExecStartPre=/bin/touch /tmp/sg-pwn",
    "$(touch${IFS}/tmp/sg-pwn)",
    "`id`",
    "a;id",
    "/srv/hf --privileged --volume /:/host",
    "a\x00b",
    "../../etc/passwd",
    "'\"\\",
    "x/// /bin/sh",
]
# Settings that are not strings on the node: where they go they are read by the operator's machine only.
OPERATOR_SIDE = {"ssh_key", "ssh_known_hosts_file", "vllm.hf_token_env", "vllm.hf_token_file", "budget.training.model",
                 "vllm.models.shape"}


def string_settings(model: type[BaseModel] = None, prefix: str = "") -> list[tuple[str, bool]]:
    """(dotted path, is a tuple) of every string setting, descending into blocks (vllm.models: one model)."""
    model = model or host_config_model()
    found = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        args = typing.get_args(annotation)
        candidates = [annotation, *args]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if nested:
            found += string_settings(nested[0], f"{prefix}{name}.")
            continue
        if typing.get_origin(annotation) is dict:
            value = args[1] if len(args) == 2 else None
            if isinstance(value, type) and issubclass(value, BaseModel):
                found += string_settings(value, f"{prefix}{name}.")
            continue
        text = str(annotation)
        if typing.get_origin(annotation) is tuple and "str" in text and "dict" not in text:
            found.append((prefix + name, True))
        elif annotation is str or "str" in text and "dict" not in text and "tuple" not in text:
            found.append((prefix + name, False))
    return found


SETTINGS = [(path, many) for path, many in string_settings() if path not in OPERATOR_SIDE]
TALLY = {"tried": 0, "refused": 0, "inert": 0, "injections": 0}


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield

    report(f"\nhostile values: {TALLY['tried']} tried over {len(SETTINGS)} string settings, {TALLY['refused']} "
          f"refused (exit 2), {TALLY['inert']} accepted and only JSON/YAML-encoded, {TALLY['injections']} injections")


def test_the_schema_walk_finds_the_settings_that_reach_the_node():
    paths = {path for path, _ in SETTINGS}
    assert {"ssh_host", "base.contact", "earlyoom.prefer_extra", "vllm.image", "vllm.hf_cache_dir",
            "vllm.native_binary", "vllm.models.model", "monitoring.prometheus.retention_time",
            "monitoring.node_exporter.systemd_units"} <= paths
    assert len(paths) >= 30


def _inventory(tmp_path: Path, path: str, value) -> Path:
    doc = copy.deepcopy(EXAMPLE)
    host = doc["all"]["children"]["spark"]["hosts"]["spark-01"]
    parts = path.split(".")
    if parts[:2] == ["vllm", "models"]:
        parts = ["vllm", "models", "llama-8b", *parts[2:]]
    target = host
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value
    inv = tmp_path / "inv"
    inv.mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump(doc, allow_unicode=True))
    return inv


def _occurrences(out: Path, raw: str) -> list[Path]:
    return [p for p in out.rglob("*") if p.is_file() and (raw in p.read_text(errors="replace")
                                                          or json.dumps(raw)[1:-1] in p.read_text(errors="replace"))]


def _round_trips(path: Path, raw: str) -> bool:
    text = path.read_text()
    if path.suffix == ".json":
        document = json.loads(text)
    elif path.suffix in (".yml", ".yaml"):
        document = yaml.safe_load(text)
    else:
        return False

    def strings(node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from strings(key)
                yield from strings(value)
        elif isinstance(node, list):
            for value in node:
                yield from strings(value)
        elif isinstance(node, str):
            yield node
    return any(raw in s for s in strings(document))


@pytest.mark.parametrize("path, many", SETTINGS, ids=[p for p, _ in SETTINGS])
def test_hostile_values_are_refused_or_inert(tmp_path, monkeypatch, path, many):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    accepted = []
    for raw in HOSTILE:
        TALLY["tried"] += 1
        inventory = _inventory(tmp_path, path, [raw] if many else raw)
        try:
            loaded = load_inventory(inventory)
        except ConfigError as error:
            TALLY["refused"] += 1
            assert any(p.field.startswith(path.split(".")[0]) or p.field in ("", path) for p in error.problems), \
                error.problems
            continue
        out = tmp_path / "render"
        try:
            render_inventory(loaded, out)
        except ConfigError:
            TALLY["refused"] += 1
            continue
        accepted.append(raw)
        for found in _occurrences(out, raw):
            if not _round_trips(found, raw):
                TALLY["injections"] += 1
            assert _round_trips(found, raw), f"{path} = {raw!r} reached {found.relative_to(out)} unencoded"
        TALLY["inert"] += 1
    if path in ("ssh_host", "vllm.image", "vllm.hf_cache_dir", "vllm.native_binary", "earlyoom.prefer_extra",
                "earlyoom.avoid_extra", "vllm.models.model"):
        assert accepted == [], f"{path} must refuse every hostile value, accepted {accepted}"


def test_a_secret_setting_never_reaches_a_render_or_an_error(tmp_path, monkeypatch):
    """The Alertmanager webhook URL is a credential: only alertmanager.yml on the node may hold it."""
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    url = "https://alerts.example.org/hooks/s3cr3t-token"
    inventory = _inventory(tmp_path, "monitoring.alertmanager.webhook_url", url)
    out = tmp_path / "render"
    render_inventory(load_inventory(inventory), out)
    assert _occurrences(out, "s3cr3t-token") == []
    node = json.loads((out / "spark-01" / "etc" / "sparkguard" / "node.json").read_text())
    assert node["settings"]["monitoring"]["alertmanager"]["webhook_url"] == "<secret>"
    with pytest.raises(ConfigError) as caught:
        load_inventory(_inventory(tmp_path, "monitoring.alertmanager.webhook_url", "ftp://s3cr3t-token"))
    assert "s3cr3t-token" not in "\n".join(p.paragraph() for p in caught.value.problems)
    with pytest.raises(ConfigError) as caught:
        load_inventory(_inventory(tmp_path, "monitoring.alertmanager.webhook_url", ["s3cr3t-token"]))
    assert "s3cr3t-token" not in "\n".join(p.paragraph() for p in caught.value.problems)


def test_the_vllm_api_key_goes_only_to_the_0600_env_file(tmp_path, monkeypatch):
    from roles.vllm.state import env_path
    from sparkguard.render import host_states

    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    monkeypatch.setenv("SG_VLLM_KEY", "sk-local-0123456789")
    inventory = _inventory(tmp_path, "vllm.api_key_env", "SG_VLLM_KEY")
    entry = load_inventory(inventory).host("spark-01")
    [vllm] = [s for s in host_states(entry) if s.role == "vllm"]
    env = vllm.file(env_path("llama-8b"))
    assert (env.mode, env.secret) == ("0600", True) and "VLLM_API_KEY=sk-local-0123456789\n" in env.content
    out = tmp_path / "render"
    render_inventory(load_inventory(inventory), out)
    assert _occurrences(out, "sk-local-0123456789") == []
    # In options it would land in a 0644 YAML and node.json: refused, pointing at the secret settings.
    with pytest.raises(ConfigError) as caught:
        load_inventory(_inventory(tmp_path, "vllm.models.options", {"api-key": "sk-local-0123456789"}))
    [problem] = caught.value.problems
    assert problem.field == "vllm.models.llama-8b.options.api-key" and "api_key_env" in problem.allowed
    assert "sk-local-0123456789" not in problem.paragraph()
