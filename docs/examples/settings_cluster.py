CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://10.0.0.9:6379/0",
    },
    "locks": {
        "BACKEND": "django_valkey.cluster_cache.cache.ClusterValkeyCache",
        "LOCATION": "valkey://10.0.0.1:6379",  # any node: the others are discovered
        "KEY_PREFIX": "locks",
        "OPTIONS": {
            # The cluster cache passes only these to its client: its SOCKET_TIMEOUT and
            # PASSWORD options are ignored (W007 warns when no socket_timeout is set).
            "BASE_CLIENT_KWARGS": {"socket_timeout": 1, "socket_connect_timeout": 1},
        },
    },
}
REDIS_LOCK = {"CACHE": "locks"}
