"""E014: models whose fenced writes could not tell which column is the fence."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, register
from django.db.models import Model

from django_redis_lock.fencing import FencedModelMixin
from django_redis_lock.fencing.fields import fence_fields


@register(Tags.models)
def check_fenced_models(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A FencedModelMixin model needs exactly one FenceField, and any model at most one."""
    configs = app_configs if app_configs is not None else apps.get_app_configs()
    return [
        error
        for config in configs
        for model in config.get_models()
        for error in fence_errors(model)
    ]


def fence_errors(model: type[Model]) -> list[CheckMessage]:
    """E014 for ``model``, if it has several FenceFields, or FencedModelMixin and none."""
    fields = fence_fields(model)
    if len(fields) == 1 or (not fields and FencedModelMixin not in model.__mro__):
        return []
    names = ", ".join(field.name for field in fields) or "none"
    return [
        Error(
            f"{model._meta.label} has {len(fields)} FenceFields ({names}): a fenced write "
            "needs exactly one.",
            hint="Keep one FenceField per model: it holds the last token the row accepted.",
            obj=model,
            id="django_redis_lock.E014",
        )
    ]
