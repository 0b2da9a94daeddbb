"""Where sparkguard's non-Python parts live, in a checkout and in an installed wheel.

In a checkout the roles, templates and deploys are top-level folders beside ``sparkguard/`` (a reviewer
reads exactly the files that get rendered); the wheel carries the same files inside the package, as
``sparkguard/roles``, ``sparkguard/templates`` and ``sparkguard/deploy_scripts`` (pyproject.toml maps them at
build time), so an installed sparkguard never puts a package named ``roles`` on anyone's path.

The roles have one import name in both: ``sparkguard.roles``. In a checkout ``sparkguard/roles`` is a link to
the top-level ``roles/`` (committed), so the name mypy checks and the tests import is the one production runs.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# An installed wheel has the deploys inside the package; a checkout (editable install) has them beside it.
INSTALLED = (PACKAGE_DIR / "deploy_scripts").is_dir()
REPO_ROOT = PACKAGE_DIR.parent  # the checkout's root (in an installed wheel: site-packages, never written to)
TEMPLATES_DIR = PACKAGE_DIR / "templates" if INSTALLED else REPO_ROOT / "templates"
DEPLOY_DIR = PACKAGE_DIR / "deploy_scripts" if INSTALLED else REPO_ROOT / "deploy"
ROLES_DIR = PACKAGE_DIR / "roles"  # the package sparkguard.roles: in a checkout, the link to roles/
# The operator's documentation (docs/*.md, docs/roles/*.md) that errors and settings point at: shipped in the
# wheel too, so `sparkguard docs --show NAME` prints it wherever sparkguard is installed.
DOCS_DIR = PACKAGE_DIR / "docs" if INSTALLED else REPO_ROOT / "docs"
