"""``python -m sparkguard.cli``: the same command as the installed ``sparkguard`` script."""

import sys

from .main import main

sys.exit(main())
