"""Apply only role ``monitoring``: pyinfra INVENTORY deploy/monitoring.py"""

from roles import register
from roles.monitoring import ROLE
from sparkguard.converge import role_deploy

register()

role_deploy(ROLE)()
