CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://10.0.0.9:6379/0",
    },
}
for i in range(5):  # five independent primaries, no replicas needed
    CACHES[f"lock{i}"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://redis-{i}.internal:6379/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    }
REDIS_LOCK = {"CACHE": ["lock0", "lock1", "lock2", "lock3", "lock4"]}
