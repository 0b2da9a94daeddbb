"""sparkguard docs: the settings reference, generated from the schema; --deploy NAME: where a deploy lives.

``--deploy site`` prints the path of the site deploy this installation carries, for plain pyinfra from
the same venv (``pyinfra INVENTORY/inventory.py "$(sparkguard docs --deploy site)"``): the checkout's
``deploy/`` or the wheel's ``sparkguard/deploy_scripts/``, whichever this sparkguard runs from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..docs import settings_reference
from ..errors import ConfigError, Problem
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("docs", help="print (or --write) the settings reference generated from the schema")
    parser.add_argument("--write", type=Path, help="write to this file instead of stdout")
    parser.add_argument("--deploy", metavar="NAME", help="print the path of this installation's deploy NAME "
                        "(site: every enabled role), for plain pyinfra")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.deploy is not None:
        from ..paths import DEPLOY_DIR

        names = sorted(p.stem for p in DEPLOY_DIR.glob("*.py") if not p.name.startswith("_"))
        if args.deploy not in names:
            raise ConfigError([Problem("", "--deploy", args.deploy, f"no such deploy; this installation has: "
                                       f"{', '.join(names)}")])
        print(DEPLOY_DIR / f"{args.deploy}.py")
        return 0
    text = settings_reference()
    if args.write:
        args.write.write_text(text)
    else:
        print(text, end="")
    return 0
