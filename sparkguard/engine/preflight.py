"""The one error of a deploy refused before any operation.

Apart from sparkguard/errors.py because it is a PyinfraError too: errors.py stays free of pyinfra, so the
offline commands (validate, render, plan, docs) start without loading pyinfra and paramiko.
"""

from __future__ import annotations

from pyinfra.api.exceptions import PyinfraError

from ..errors import ConfigError


class PreflightError(ConfigError, PyinfraError):
    """A deploy refused before any operation: its settings are invalid, or the node is not what they declare.

    One type for that one failure, wherever pyinfra builds the deploy: a ConfigError to sparkguard (exit 2
    or 3, one paragraph per problem), and a PyinfraError to pyinfra, whose own CLI then prints the
    paragraphs of `pyinfra INVENTORY deploy/site.py` or of a team's deploy file without a traceback.
    """
