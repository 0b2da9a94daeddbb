"""Apply only role ``monitoring``: pyinfra INVENTORY deploy/monitoring.py"""

from sparkguard.builtin_roles import register, role
from sparkguard.engine.converge import role_deploy

register()
ROLE = role("monitoring").ROLE

role_deploy(ROLE)()
