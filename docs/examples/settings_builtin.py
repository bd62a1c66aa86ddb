CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",  # Django's own: no extra
        "LOCATION": "redis://127.0.0.1:6379/0",
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    },
}
