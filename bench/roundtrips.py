"""Count SSH round trips per host at pyinfra's SSH connector (commands run + files uploaded)."""

from __future__ import annotations

from collections import Counter

from pyinfra.connectors.ssh import SSHConnector

ROUND_TRIPS: Counter = Counter()


def _counting(method):
    def wrapper(self, *args, **kwargs):
        ROUND_TRIPS[self.host.name] += 1
        return method(self, *args, **kwargs)
    return wrapper


SSHConnector.run_shell_command = _counting(SSHConnector.run_shell_command)
SSHConnector.put_file = _counting(SSHConnector.put_file)
