"""Django settings of the fault suite's workers and controller: only what a lock needs.

FAULTS_SETTINGS (JSON) carries the scenario's CACHES and REDIS_LOCK, and any other setting the
topology needs (such as DJANGO_REDIS_CONNECTION_FACTORY for Sentinel).
"""

from __future__ import annotations

import json
import os

SECRET_KEY = "django-redis-lock-faults-only"
INSTALLED_APPS = ["django_redis_lock"]
DATABASES: dict[str, object] = {}
USE_TZ = True

globals().update(json.loads(os.environ.get("FAULTS_SETTINGS", "{}")))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The workers' warnings (renewals failed, locks lost) are expected under faults: the
    # suite counts them through exceptions instead of printing them.
    "loggers": {"django_redis_lock": {"level": "CRITICAL"}},
}
