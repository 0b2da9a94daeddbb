"""Apply only role ``monitoring``: pyinfra INVENTORY deploy/monitoring.py"""

from roles.monitoring import ROLE
from sparkguard.converge import role_deploy

role_deploy(ROLE)()
