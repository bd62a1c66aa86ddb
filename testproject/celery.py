"""The demo project's Celery app: broker and results on CELERY_BROKER_URL (default REDIS_URL)."""

from __future__ import annotations

from celery import Celery

app = Celery("testproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
