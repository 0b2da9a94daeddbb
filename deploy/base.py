"""Apply only role ``base``: pyinfra INVENTORY deploy/base.py"""

from roles import register
from roles.base import ROLE
from sparkguard.converge import role_deploy

register()

role_deploy(ROLE)()
