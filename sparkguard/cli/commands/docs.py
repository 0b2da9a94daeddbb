"""sparkguard docs: the settings reference, generated from the schema; --deploy NAME: where a deploy lives;
--list / --show NAME: the documentation errors and settings point at (docs/NAME.md), from the checkout or the
wheel, so an operator with a pipx install can read what a message names.

``--deploy site`` prints the path of the site deploy this installation carries, for plain pyinfra from
the same venv (``pyinfra INVENTORY/inventory.py "$(sparkguard docs --deploy site)"``): the checkout's
``deploy/`` or the wheel's ``sparkguard/deploy_scripts/``, whichever this sparkguard runs from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...docs import settings_reference
from ...errors import ConfigError, Problem
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("docs", help="print (or --write) the settings reference generated from the schema")
    parser.add_argument("--write", type=Path, help="write to this file instead of stdout")
    parser.add_argument("--deploy", metavar="NAME", help="print the path of this installation's deploy NAME "
                        "(site: every enabled role), for plain pyinfra")
    parser.add_argument("--list", action="store_true", help="list the documents this installation carries")
    parser.add_argument("--show", metavar="NAME", help="print a document, named as messages name it "
                        "(docs/earlyoom-measurements.md, roles/swap, planner)")
    parser.set_defaults(func=run)


def documents() -> dict[str, Path]:
    """Every shipped document by its name: its path under docs/ without .md (``roles/swap``)."""
    from ...paths import DOCS_DIR

    return {p.relative_to(DOCS_DIR).with_suffix("").as_posix(): p for p in sorted(DOCS_DIR.rglob("*.md"))}


def _show(name: str) -> int:
    known = documents()
    wanted = name.removeprefix("docs/").removesuffix(".md")
    if wanted not in known:  # only a listed name is read: never a path the caller made up
        raise ConfigError([Problem("", "--show", name, f"no such document; this installation has: {', '.join(known)}")])
    print(known[wanted].read_text(), end="")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        print("\n".join(documents()))
        return 0
    if args.show is not None:
        return _show(args.show)
    if args.deploy is not None:
        from ...paths import DEPLOY_DIR

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
