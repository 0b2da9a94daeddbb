"""The webhook URL alerts are sent to: held in the inventory (``webhook_url``) or, better, read on the
operator's machine when apply runs (``webhook_url_env`` / ``webhook_url_file``) and never stored.

Either way only alertmanager.yml on the node (0640) holds it. Read from the environment or a file, the
inventory under review holds no credential, and the Ansible export looks the URL up on the controller.
"""

from __future__ import annotations

from sparkguard.inventory.secrets import read_secret, source_words

from .settings import AlertmanagerSettings

FIELD = "monitoring.alertmanager.webhook_url"


def configured(am: AlertmanagerSettings) -> bool:
    """A webhook receiver is set, whichever way (its value may not be readable here: render runs offline)."""
    return bool(am.webhook_url or am.webhook_url_env or am.webhook_url_file)


def sources(am: AlertmanagerSettings) -> list[tuple[str, str]]:
    """(field, value as shown) of each way the URL is set; more than one is refused."""
    given = (("", am.webhook_url, "<secret>"), ("_env", am.webhook_url_env, am.webhook_url_env or ""),
             ("_file", am.webhook_url_file, am.webhook_url_file or ""))
    return [(f"{FIELD}{suffix}", shown) for suffix, value, shown in given if value]


def url(am: AlertmanagerSettings) -> str | None:
    """The URL, or None when it is read from an environment variable or file that is unset or empty here."""
    if am.webhook_url:
        return am.webhook_url
    if am.webhook_url_env or am.webhook_url_file:
        return read_secret(am.webhook_url_env, am.webhook_url_file, "secret", f"{FIELD}_file")
    return None


def where(am: AlertmanagerSettings) -> str:
    """Where apply reads the URL from, in words (for a refusal)."""
    return source_words(am.webhook_url_env, am.webhook_url_file)
