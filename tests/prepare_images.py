"""Build the images only the memory replays use, while the first phase of the full run goes on (dev.sh).

The replays run alone at the end, with the machine to themselves: an image they built there would be
minutes of wall time with nothing beside it (the incident VM's, 73 s; the trixie rootfs, about a minute, on
a machine that has neither cached). Built here, beside the first phase, they cost a share of its CPUs instead.
Both builds take their cache's lock, so a replay started meanwhile waits for the build instead of doing it twice.

    python -m tests.prepare_images
"""

from __future__ import annotations

import sys
import time

from sparkguard.dev import sandbox
from tests.vm import incident

# (what, how): what the replays boot that nothing before them does.
REPLAY_ONLY = (
    ("the incident VM image (tests/vm/test_incident_vm.py)",
     lambda log: incident.ensure_image(log=log)),
    ("the trixie sandbox rootfs (tests/sandbox/test_earlyoom_trixie.py)",
     lambda log: sandbox.ensure_rootfs("trixie", log=log)),
)


def main() -> int:
    failed = 0
    for what, build in REPLAY_ONLY:
        started = time.monotonic()
        try:
            build(lambda *lines: print(*lines, flush=True))
        except Exception as error:  # noqa: BLE001 - said, and the replay builds it again itself
            failed += 1
            print(f"prepare_images: {what} failed: {error}", flush=True)
            continue
        print(f"prepare_images: {what} ready in {time.monotonic() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
