"""Django settings of the fault suite's workers and controller: only what a lock needs.

FAULTS_SETTINGS (JSON) carries the scenario's CACHES and REDIS_LOCK, and any other setting the
topology needs (such as DJANGO_REDIS_CONNECTION_FACTORY for Sentinel).
"""

from __future__ import annotations

import json
import os

SECRET_KEY = "django-redis-lock-faults-only"
INSTALLED_APPS = ["django_redis_lock", "faults.apps.FaultsConfig"]
# The run's store (FAULTS_STORE, a SQLite file): the workers write its counter with the ORM.
DATABASES: dict[str, object] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("FAULTS_STORE", ":memory:"),
        # Workers wait for each other's short transactions, as the store's own connections do.
        "OPTIONS": {"timeout": 30},
    }
}
USE_TZ = True

globals().update(json.loads(os.environ.get("FAULTS_SETTINGS", "{}")))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The workers' warnings (renewals failed, locks lost) are expected under faults: the
    # suite counts them through exceptions instead of printing them.
    "loggers": {"django_redis_lock": {"level": "CRITICAL"}},
}
