"""A runnable Django project: the demo of django_redis_lock and the settings of its tests."""
