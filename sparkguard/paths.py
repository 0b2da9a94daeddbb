"""Where the repository's non-Python parts live.

sparkguard is installed editable (``pip install -e .``) from a checkout, so
templates and deploys are found relative to the source tree rather than copied
into site-packages: a reviewer reads exactly the files that get rendered.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = REPO_ROOT / "templates"
