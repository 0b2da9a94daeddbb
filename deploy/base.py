"""Apply only role ``base``: pyinfra INVENTORY deploy/base.py"""

from sparkguard.builtin_roles import register, role
from sparkguard.engine.converge import role_deploy

register()
ROLE = role("base").ROLE

role_deploy(ROLE)()
