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

from sparkguard.engine.render import render_inventory
from sparkguard.errors import ConfigError
from sparkguard.hostconfig import host_config_model
from sparkguard.inventory.loader import load_inventory
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
    if path.startswith("monitoring.alertmanager.webhook_url"):
        # The host's own webhook source is the only one (two are refused before the value is looked at); the
        # fleet's receiver is email, so the other host still has one.
        doc["all"]["vars"]["monitoring"]["alertmanager"] = {
            "email_to": "ops@example.org", "email_from": "spark@example.org", "email_smarthost": "smtp.example.org:25"}
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
    from sparkguard.engine.render import host_states
    from sparkguard.roles.vllm.state import env_path

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


# ---------------------------------------------------------------- issue 27: secrets under any spelling, URLs, files
CANARY = "s3cr3t-canary-27"


def _paragraphs(error: ConfigError) -> str:
    return "\n".join(p.paragraph() for p in error.problems)


@pytest.mark.parametrize("name, pointer", [
    ("api-key", "api_key_env"), ("--api-key", "api_key_env"), ("Api-Key", "api_key_env"), ("API_KEY", "api_key_env"),
    ("hf-token", "hf_token_env"), ("hf_token", "hf_token_env"), ("--hf_token", "hf_token_env"), ("HF-Token", "hf_token_env"),
    ("hf-api-token", "hf_token_env"), ("password", "api_key_env"),
])
def test_a_secret_option_is_refused_under_any_spelling_and_its_value_never_shown(tmp_path, monkeypatch, name, pointer):
    """Option names are normalised (lower case, _ -> -, no leading dashes) before the secret list is matched."""
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    with pytest.raises(ConfigError) as caught:
        load_inventory(_inventory(tmp_path, "vllm.models.options", {name: CANARY}))
    [problem] = [p for p in caught.value.problems if p.field.endswith(f".options.{name}")]
    assert problem.field == f"vllm.models.llama-8b.options.{name}" and pointer in problem.allowed
    assert CANARY not in _paragraphs(caught.value)


def test_tokenizer_options_are_not_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    inventory = _inventory(tmp_path, "vllm.models.options", {"tokenizer-mode": "auto", "max-num-batched-tokens": 8192})
    assert load_inventory(inventory).host("spark-01")


def _url_settings() -> list[tuple[str, bool]]:
    """Every string setting whose name says URL, found from the schema (a new one is covered the day it is added)."""
    return [(path, many) for path, many in string_settings() if path.rsplit(".", 1)[-1].endswith(("url", "urls"))]


def test_the_schema_walk_finds_the_url_settings():
    assert {p for p, _ in _url_settings()} >= {"monitoring.grafana.prometheus_url", "monitoring.alertmanager.external_urls",
                                              "monitoring.alertmanager.webhook_url"}


@pytest.mark.parametrize("path, many", _url_settings(), ids=[p for p, _ in _url_settings()])
def test_credentials_in_a_url_setting_are_refused_and_never_shown(tmp_path, monkeypatch, path, many):
    """userinfo is refused in every URL setting, shown as <redacted>; a secret URL setting (a webhook, a credential
    by declaration) keeps it, and shows <secret> wherever anything is printed."""
    from sparkguard.settings import is_secret

    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    url = f"https://user:{CANARY}@am.example.org:9093"
    inventory = _inventory(tmp_path, path, [url] if many else url)
    owner, name = path.rsplit(".", 1)
    model = host_config_model()
    for part in owner.split("."):
        model = model.model_fields[part].annotation
    if is_secret(model.model_fields[name]):
        out = tmp_path / "render"
        render_inventory(load_inventory(inventory), out)
        assert _occurrences(out, CANARY) == []  # alertmanager.yml (0640) holds it; a render shows a placeholder
        return
    with pytest.raises(ConfigError) as caught:
        load_inventory(inventory)
    text = _paragraphs(caught.value)
    assert "credentials in the URL" in text and "https://<redacted>@am.example.org:9093" in text
    assert CANARY not in text


@pytest.mark.parametrize("value", [f"http://admin:{CANARY}@10.0.0.1:4317", {"endpoint": f"https://{CANARY}@h/x"}])
def test_credentials_in_a_url_inside_vllm_options_are_refused(tmp_path, monkeypatch, value):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    with pytest.raises(ConfigError) as caught:
        load_inventory(_inventory(tmp_path, "vllm.models.options", {"otlp-traces-endpoint": value}))
    assert "credentials in the URL" in _paragraphs(caught.value) and CANARY not in _paragraphs(caught.value)


def test_a_scheme_less_url_with_credentials_is_not_echoed_either(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    for path, value in (("monitoring.alertmanager.external_urls", [f"admin:{CANARY}@am:9093"]),
                        ("monitoring.grafana.prometheus_url", f"admin:{CANARY}@prometheus:9090")):
        with pytest.raises(ConfigError) as caught:
            load_inventory(_inventory(tmp_path, path, value))
        assert CANARY not in _paragraphs(caught.value) and "<redacted>@" in _paragraphs(caught.value)


@pytest.mark.parametrize("key", ["password", "hf_token", "Api-Key", "--api-key", "client_secret", "auth_token"])
def test_no_error_shows_the_value_of_a_secret_looking_key(tmp_path, monkeypatch, key):
    """An unknown key in a block (a typo, or a pasted secrets file) is refused by name; its value is <secret>."""
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    for path in ("earlyoom", "monitoring.web", "vllm"):
        doc = copy.deepcopy(EXAMPLE)
        target = doc["all"]["children"]["spark"]["hosts"]["spark-01"]
        for part in path.split("."):
            target = target.setdefault(part, {})
        target[key] = {"nested": CANARY} if path == "vllm" else CANARY
        inventory = tmp_path / "inv"
        inventory.mkdir(exist_ok=True)
        (inventory / "hosts.yml").write_text(yaml.safe_dump(doc))
        with pytest.raises(ConfigError) as caught:
            load_inventory(inventory)
        assert f"{path}.{key}" in _paragraphs(caught.value) and CANARY not in _paragraphs(caught.value)


def test_a_vars_file_linked_from_outside_the_inventory_is_named_never_quoted(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    outside = tmp_path / "outside"
    outside.mkdir()
    inventory = _inventory(tmp_path, "base.contact", "ops")
    (inventory / "host_vars").mkdir()
    link = inventory / "host_vars" / "spark-01.yml"
    for content in (f"auths:\n  ghcr.io: {{auth: {CANARY}}}\n",          # an unknown setting: its value
                    f"{CANARY}\n",                                       # not a mapping: the file itself
                    f"earlyoom: {{term_percent: {CANARY}}}\n",           # a known setting, a bad value
                    f"token: '{CANARY}\n  x: [\n",                       # a YAML error: PyYAML quotes the line
                    f"base: {{contact: \"{CANARY}\\x01\"}}\n"):          # a bad value in a block
        (outside / "secrets.yml").write_text(content)
        link.unlink(missing_ok=True)
        link.symlink_to(outside / "secrets.yml")
        with pytest.raises(ConfigError) as caught:
            load_inventory(inventory)
        text = _paragraphs(caught.value)
        assert CANARY not in text, (content, text)
        assert any(str(outside / "secrets.yml") in p.source or "host_vars/spark-01.yml" in p.source
                   for p in caught.value.problems), text


def test_a_yaml_error_never_quotes_a_line(tmp_path):
    inventory = tmp_path / "inv"
    inventory.mkdir()
    for text in (f"all:\n  vars:\n    password: \"{CANARY}\n  x: [\n", f"all: !{CANARY} x\n",
                 f"all:\n  hosts: {{a: b}}\n  vars: {{x: '{CANARY}'}} y\n"):
        (inventory / "hosts.yml").write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_inventory(inventory)
        assert CANARY not in _paragraphs(caught.value), _paragraphs(caught.value)
