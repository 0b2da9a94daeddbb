"""Apply every enabled sparkguard role.

    pyinfra inventory/example/inventory.py deploy/site.py
    sparkguard apply inventory/example          # same, plus a report and clear errors
"""

from sparkguard.builtin_roles import register
from sparkguard.engine.converge import site_deploy

register()

site_deploy()()
