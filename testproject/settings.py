"""Settings of the demo project, also used by the test suite (DJANGO_SETTINGS_MODULE).

The Redis server comes from REDIS_URL. `python3 dev.py demo` and the test suite start a private
one and export its URL; run by hand, the project expects a Redis on 127.0.0.1:6379.
"""

from __future__ import annotations

import json
import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in {"", "0", "false", "no", "off"}


DEBUG = _env_flag("DJANGO_DEBUG", default=True)
SECRET_KEY = os.environ.get(
    "DJANGO_SECRET_KEY", "django-insecure-testproject-only-for-the-demo-and-the-tests"
)
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_redis_lock",
    "testproject",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"
WSGI_APPLICATION = "testproject.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        # TESTPROJECT_DB: another SQLite file, or ":memory:" (the benchmark uses that).
        "NAME": os.environ.get("TESTPROJECT_DB") or VAR_DIR / "testproject.sqlite3",
        # A file, not memory: the tests' task workers (django-tasks-db's db_worker) share it.
        "TEST": {"NAME": VAR_DIR / "test-testproject.sqlite3"},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def build_caches(url: str) -> dict[str, dict[str, Any]]:
    """CACHES for a Redis at `url`, with one alias per way of reaching it.

    "default" (django-redis) and "builtin" (Django's own RedisCache) share the server, the
    database and the KEY_PREFIX, so both guard the same locks. "locks_db1" is django-redis on
    database 1 of the same server with its own prefix: the layout the README recommends for
    keeping locks away from `cache.clear()`. Every alias has socket timeouts, so a Redis that
    stops answering raises errors instead of hanging requests.
    """
    db1_url = urlunsplit(urlsplit(url)._replace(path="/1"))
    return {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "testproject",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": 5,
                "SOCKET_TIMEOUT": 5,
            },
        },
        "builtin": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "testproject",
            "OPTIONS": {"socket_connect_timeout": 5, "socket_timeout": 5},
        },
        "locks_db1": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": db1_url,
            "KEY_PREFIX": "locks",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": 5,
                "SOCKET_TIMEOUT": 5,
            },
        },
    }


def build_quorum_caches(urls: list[str]) -> dict[str, dict[str, Any]]:
    """One django-redis alias per independent Redis primary, "quorum0" on: the caches of a
    quorum lock (REDIS_LOCK["CACHE"] lists them)."""
    return {
        f"quorum{i}": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "testproject",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        }
        for i, url in enumerate(urls)
    }


CACHES = build_caches(REDIS_URL)
# REDIS_LOCK_QUORUM (Redis URLs separated by commas) makes every lock a quorum lock on them.
QUORUM_URLS = [url for url in os.environ.get("REDIS_LOCK_QUORUM", "").split(",") if url]
CACHES.update(build_quorum_caches(QUORUM_URLS))

# Celery (testproject.celery): the tests start a worker with a broker of their own.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", CELERY_BROKER_URL)
CELERY_TASK_TRACK_STARTED = True

REDIS_LOCK: dict[str, Any] = {"CACHE": list(build_quorum_caches(QUORUM_URLS)) or "default"}
# For the workers the tests start on other topologies: cache aliases and REDIS_LOCK keys (JSON).
CACHES.update(json.loads(os.environ.get("TESTPROJECT_CACHES") or "{}"))
REDIS_LOCK.update(json.loads(os.environ.get("TESTPROJECT_REDIS_LOCK") or "{}"))

# Django's tasks (testproject.jobs): django.tasks on Django 6.0+, else the django-tasks backport,
# when installed; and django-tasks-db's DatabaseBackend ("db"), whose db_worker the tests run.
TASKS_FRAMEWORK = next((name for name in ("django.tasks", "django_tasks") if find_spec(name)), None)
if TASKS_FRAMEWORK is not None:
    if TASKS_FRAMEWORK == "django_tasks":
        INSTALLED_APPS.append("django_tasks")
    TASKS = {"default": {"BACKEND": f"{TASKS_FRAMEWORK}.backends.immediate.ImmediateBackend"}}
    if find_spec("django_tasks_db"):
        INSTALLED_APPS.append("django_tasks_db")
        TASKS["db"] = {"BACKEND": "django_tasks_db.DatabaseBackend"}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "console": {"format": "{asctime} {levelname} {name}: {message}", "style": "{"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "console"},
    },
    "loggers": {
        "django_redis_lock": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
