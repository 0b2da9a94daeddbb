"""Apply only role ``base``: pyinfra INVENTORY deploy/base.py"""

from roles.base import ROLE
from sparkguard.converge import role_deploy

role_deploy(ROLE)()
