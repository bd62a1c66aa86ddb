INSTALLED_APPS = [
    # ... Django's apps and yours ...
    "django_redis_lock",
]

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",  # pip install django-redis
        "LOCATION": "redis://127.0.0.1:6379/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
    },
}
