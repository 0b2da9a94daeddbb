"""pyinfra adapter for the sparkguard inventory in this directory (hosts.yml).

    pyinfra inventory/example/inventory.py deploy/site.py
"""

from sparkguard.pyinfra_inventory import groups_for as _groups_for

globals().update(_groups_for(__file__))
