"""sparkguard: keep unified-memory GPU nodes alive under memory pressure.

Shared code for the roles in ``roles/``: the settings schema, the YAML
inventory, node facts, the desired-state model and the CLI.
"""

__version__ = "0.2.0"
