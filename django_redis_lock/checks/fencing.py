"""E014 and W013: models whose fences cannot work, or that a plain save() would set back."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, Warning, register
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
    """E014 for ``model``, if it has several FenceFields, FencedModelMixin and none, or a
    nullable one; W013 if it has one without FencedModelMixin."""
    fields = fence_fields(model)
    mixed_in = FencedModelMixin in model.__mro__
    if len(fields) == 1 and fields[0].null:
        return [
            Error(
                f"{model._meta.label}.{fields[0].name} is a nullable FenceField: NULL accepts "
                "no token, and fenced writes would match no row.",
                hint="FenceField() is not null, with a default of 0.",
                obj=model,
                id="django_redis_lock.E014",
            )
        ]
    if len(fields) == 1 and not mixed_in:
        return [
            Warning(
                f"{model._meta.label} has a FenceField but not FencedModelMixin: its plain "
                "save() (a form's, the admin's) writes back the fence it read, which may be "
                "older than the row's, and lets a stale holder's write in again.",
                hint="class Model(FencedModelMixin, models.Model): a save without a fence "
                "then leaves the fence column as it is.",
                obj=model,
                id="django_redis_lock.W013",
            )
        ]
    if len(fields) == 1 or (not fields and not mixed_in):
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
