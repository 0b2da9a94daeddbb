"""Commenting fstab swap lines out and back in, byte for byte.

``off`` prefixes every active swap line with a marker instead of deleting it;
``on`` removes exactly that marker, so on -> off -> on gives back the original
file unchanged. Lines the operator commented out themselves are never touched.
"""

from __future__ import annotations

MARKER = "#sparkguard-swap-off# "


def _is_swap_entry(line: str) -> bool:
    fields = line.split()
    return len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap"


def disable_swap_lines(text: str) -> str:
    """
    >>> disable_swap_lines("/dev/vda1 / ext4 defaults 0 1\\n/swap.img none swap sw 0 0\\n")
    '/dev/vda1 / ext4 defaults 0 1\\n#sparkguard-swap-off# /swap.img none swap sw 0 0\\n'
    """
    return "".join(MARKER + line if _is_swap_entry(line) else line for line in text.splitlines(keepends=True))


def enable_swap_lines(text: str) -> str:
    """
    >>> enable_swap_lines("#sparkguard-swap-off# /swap.img none swap sw 0 0\\n# /old none swap sw 0 0\\n")
    '/swap.img none swap sw 0 0\\n# /old none swap sw 0 0\\n'
    """
    return "".join(line[len(MARKER):] if line.startswith(MARKER) else line
                   for line in text.splitlines(keepends=True))
