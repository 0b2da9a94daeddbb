"""Commenting fstab swap lines out and back in, byte for byte.

``off`` prefixes every active swap line with a marker instead of deleting it;
``on`` removes exactly that marker, so on -> off -> on gives back the original
file unchanged. Lines the operator commented out themselves are never touched.

Both are a regular expression and its replacement (``sparkguard.state.FileEdit``), not Python code,
so that ``ansible.builtin.replace`` in the Ansible export edits the file exactly as apply does. A line
ends at a newline, as fstab(5) reads it.
"""

from __future__ import annotations

import re

from sparkguard.state import replace_all

MARKER = "#sparkguard-swap-off# "
_BLANKS = r"[^\S\n]+"  # spaces and tabs between fields, never the end of the line
# A swap entry: at least three fields, the first not a comment, the third exactly `swap`. The match is
# empty, at the start of the line, so the replacement puts the marker in front and keeps the line as it is.
SWAP_ENTRY = rf"^(?=[^\S\n]*[^\s#]\S*{_BLANKS}\S+{_BLANKS}swap(?!\S))"
# A line this module commented out: the marker at its very start.
MARKED = "^" + re.escape(MARKER)
DISABLE = (SWAP_ENTRY, MARKER)  # (regexp, replacement) as FileEdit and ansible.builtin.replace take them
ENABLE = (MARKED, "")


def disable_swap_lines(text: str) -> str:
    """
    >>> disable_swap_lines("/dev/vda1 / ext4 defaults 0 1\\n/swap.img none swap sw 0 0\\n")
    '/dev/vda1 / ext4 defaults 0 1\\n#sparkguard-swap-off# /swap.img none swap sw 0 0\\n'
    """
    return replace_all(*DISABLE, text)


def enable_swap_lines(text: str) -> str:
    """
    >>> enable_swap_lines("#sparkguard-swap-off# /swap.img none swap sw 0 0\\n# /old none swap sw 0 0\\n")
    '/swap.img none swap sw 0 0\\n# /old none swap sw 0 0\\n'
    """
    return replace_all(*ENABLE, text)
