"""The lock itself: :class:`~django_redis_lock.core.lock.Lock`, its operations written once as
flows (``flows.py``, ``attempts.py``) of steps (``steps.py``), and the two drivers that take
them to Redis, blocking or awaited (``drivers.py``)."""
