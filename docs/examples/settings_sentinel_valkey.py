CACHES = {
    "default": {
        "BACKEND": "django_valkey.cache.ValkeyCache",
        "LOCATION": "valkey://mymaster/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_valkey.client.SentinelClient",
            "CONNECTION_FACTORY": "django_valkey.pool.SentinelConnectionFactory",
            "SENTINELS": [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26379)],
            "SENTINEL_KWARGS": {"socket_timeout": 0.5},
            "SOCKET_CONNECT_TIMEOUT": 1,
            "SOCKET_TIMEOUT": 2,
        },
    }
}
REDIS_LOCK = {"WAIT_REPLICAS": 1}
