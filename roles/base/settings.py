"""Defaults of role ``base``: every variable, in one place."""

from sparkguard.settings import Settings, Text, setting


class BaseSettings(Settings):
    """The node-side layout every other role builds on."""

    enabled: bool = setting(True, "Install /etc/sparkguard and node.json (other roles read their inputs from it).")
    contact: Text = setting("", "Who to call about this node; written to node.json so a responder finds it.")
