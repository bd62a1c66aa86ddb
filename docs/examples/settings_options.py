REDIS_LOCK = {"CACHE": "default", "TIMEOUT": 30, "AUTO_RENEW": True}
