"""The model field that holds a row's fence, and how a model's one fence field is found."""

from __future__ import annotations

from typing import Any

from django.db import models


class FenceField(models.BigIntegerField):  # type: ignore[type-arg]  # not subscriptable at run time
    """The last fencing token a row accepted: a ``BigIntegerField``, 0 by default (a row no
    hold has written accepts any token), and not editable (no form shows it).

    Adding it to an existing table is an ``AddField`` whose default fills the rows with 0;
    turning an integer column that already holds tokens into one changes no column.
    """

    description = "The last fencing token the row accepted"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("default", 0)
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        # Only what differs from our defaults goes into migrations.
        if kwargs.get("default") == 0:
            del kwargs["default"]
        if kwargs.get("editable", True) is False:
            del kwargs["editable"]
        else:
            kwargs["editable"] = True
        return name, path, args, kwargs


def fence_fields(model: type[models.Model]) -> list[FenceField]:
    """The FenceFields of ``model`` that have a column of its own."""
    return [field for field in model._meta.concrete_fields if isinstance(field, FenceField)]


def fence_field_of(model: type[models.Model]) -> FenceField:
    """The one FenceField of ``model``; TypeError when it has none, or several."""
    fields = fence_fields(model)
    if len(fields) != 1:
        found = ", ".join(field.name for field in fields) or "none"
        raise TypeError(
            f"A fenced write needs a model with exactly one FenceField; "
            f"{model._meta.label} has {found}."
        )
    return fields[0]
