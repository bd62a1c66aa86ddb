"""The fault suite as a Django app, so that its workers write the counter through the ORM."""

from __future__ import annotations

from pathlib import Path

from django.apps import AppConfig


class FaultsConfig(AppConfig):
    name = "faults"
    # faults/ is a folder of modules without an __init__.py: Django needs its path said.
    path = str(Path(__file__).resolve().parent)
    default_auto_field = "django.db.models.AutoField"
