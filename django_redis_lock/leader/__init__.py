"""Run something once across instances: leadership of a name, fenced by its epoch.

``leader(name)`` is the leadership (see :mod:`django_redis_lock.leader.leadership`);
``manage.py locks lead NAME -- COMMAND`` supervises a command that runs only while its process
leads (see :mod:`django_redis_lock.leader.supervisor`).
"""

from django_redis_lock.leader.leadership import PREFIX, Leadership, leader

__all__ = ["PREFIX", "Leadership", "leader"]
