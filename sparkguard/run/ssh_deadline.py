"""A deadline for the SSH waits that paramiko leaves without one.

paramiko's ``Channel.exec_command`` (and ``recv_exit_status``) wait for the server's answer
with no timeout at all: a channel's ``settimeout`` bounds reads, not the request. A peer that
stops answering while the TCP connection stays open blocks the caller for good. That is what a
node that crashes or hangs under memory pressure looks like behind anything that keeps the
connection's host side open (qemu's user network, a bastion, a load balancer), and on a plain
network it lasts until the kernel gives up retransmitting (about 15 minutes). An apply taking a
node's lock, or a test polling a rebooting VM, would hang there instead of saying which node did
not answer.

``closing_at_deadline`` closes the connection's transport when a block is still running after
its deadline, and then raises the caller's own error instead of whatever the block ended with.
Closing the transport wakes every wait on its channels; paramiko then raises ``SSHException`` or
``EOFError``, or reads end early, in the waiting thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import paramiko


@contextmanager
def closing_at_deadline(transport: paramiko.Transport, seconds: float, expired: Exception,
                        on_expiry: Callable[[], None] | None = None) -> Iterator[None]:
    """Close ``transport`` if the ``with`` block has not finished after ``seconds``; then raise ``expired``.

    ``expired`` is raised whenever the deadline closed the connection, even if the block went on
    to finish (or return) with what it had: its result was cut short and must not be used.
    ``on_expiry`` runs before the connection is closed, so whoever its closing wakes sees it done.
    """
    cut = threading.Event()

    def expire() -> None:
        cut.set()
        if on_expiry is not None:
            on_expiry()
        transport.close()

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception as error:
        if cut.is_set():
            raise expired from error
        raise
    finally:
        timer.cancel()
    if cut.is_set():
        raise expired
