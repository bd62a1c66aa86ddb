pytest_plugins = ["django_redis_lock.testing.pytest"]
