CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://mymaster/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26379)],
            "SENTINEL_KWARGS": {"socket_timeout": 0.5},
            "SOCKET_CONNECT_TIMEOUT": 1,
            "SOCKET_TIMEOUT": 2,
        },
    }
}
REDIS_LOCK = {"WAIT_REPLICAS": 1}
