"""The settings reference is generated from the schema and committed; keep them equal."""

from sparkguard.docs import settings_reference
from tests.conftest import REPO


def test_settings_reference_is_current():
    committed = (REPO / "docs" / "settings.md").read_text()
    assert committed == settings_reference(), "run: sparkguard docs --write docs/settings.md"


def test_every_setting_is_documented():
    from sparkguard.hostconfig import host_config_model

    def walk(model, prefix=""):
        for name, info in model.model_fields.items():
            annotation = info.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                yield from walk(annotation, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}", info.description

    undocumented = [name for name, doc in walk(host_config_model()) if not doc]
    assert undocumented == []
