from redis.sentinel import Sentinel

SENTINELS = [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26379)]
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://mymaster/0",
        "OPTIONS": {
            "pool_class": "redis.sentinel.SentinelConnectionPool",
            "service_name": "mymaster",
            "sentinel_manager": Sentinel(SENTINELS, sentinel_kwargs={"socket_timeout": 0.5}),
            "socket_connect_timeout": 1,
            "socket_timeout": 2,
        },
    }
}
REDIS_LOCK = {"WAIT_REPLICAS": 1}
