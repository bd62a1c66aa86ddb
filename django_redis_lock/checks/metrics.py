"""E006 for METRICS and E015: metrics settings that cannot work, read by the same functions of
``conf`` as the locks read them at run time."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error
from django.utils.module_loading import import_string

from django_redis_lock.checks.caches import refusal
from django_redis_lock.conf import metrics_flag, metrics_max_labels

_OTHER = "REDIS_LOCK['METRICS_OTHER']"
_REGISTRY = "REDIS_LOCK['METRICS_REGISTRY']"


def check_metrics(options: dict[str, Any]) -> list[CheckMessage]:
    """METRICS is True or False (E006); METRICS_REGISTRY names a CollectorRegistry (when
    prometheus_client is installed), METRICS_OTHER is a label and METRICS_MAX_LABELS a number
    of them (E015)."""
    flag = refusal(lambda value, what: metrics_flag(value), options["METRICS"], "")
    hint = "At run time such a value turns metrics off: write False for that."
    errors: list[CheckMessage] = (
        [Error(flag, hint=hint, id="django_redis_lock.E006")] if flag else []
    )
    other = options["METRICS_OTHER"]
    if not isinstance(other, str) or not other:
        errors.append(_error(f"{_OTHER} must be a non-empty str, not {other!r}."))
    why = refusal(lambda value, what: metrics_max_labels(value), options["METRICS_MAX_LABELS"], "")
    why_not = _registry_refusal(options["METRICS_REGISTRY"])
    return errors + [_error(each) for each in (why, why_not) if each]


def _registry_refusal(path: object) -> str | None:
    """Why METRICS_REGISTRY cannot be used, or None."""
    if path is None:
        return None
    if not isinstance(path, str):
        return f"{_REGISTRY} must be a dotted path, not {path!r}."
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:  # nothing uses it: prometheus_client is not installed
        return None
    try:
        registry = import_string(path)
    except ImportError as exc:
        return f"{_REGISTRY} {path!r} cannot be imported: {exc}"
    if not isinstance(registry, CollectorRegistry):
        return f"{_REGISTRY} {path!r} is a {type(registry).__name__}, not a CollectorRegistry."
    return None


def _error(message: str) -> Error:
    return Error(
        message,
        hint="METRICS_REGISTRY: the dotted path of a prometheus_client CollectorRegistry, or "
        "None for its default registry; METRICS_OTHER: the label of names without a template "
        "(and of templates past METRICS_MAX_LABELS, a whole number from 1).",
        id="django_redis_lock.E015",
    )
