"""E015: metrics settings that cannot work (METRICS itself is a flag: E006)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error
from django.utils.module_loading import import_string

_OTHER = "REDIS_LOCK['METRICS_OTHER']"
_REGISTRY = "REDIS_LOCK['METRICS_REGISTRY']"


def check_metrics(options: dict[str, Any]) -> list[CheckMessage]:
    """METRICS_REGISTRY names a CollectorRegistry (when prometheus_client is installed);
    METRICS_OTHER is a label."""
    errors: list[CheckMessage] = []
    other = options["METRICS_OTHER"]
    if not isinstance(other, str) or not other:
        errors.append(_error(f"{_OTHER} must be a non-empty str, not {other!r}."))
    why = _registry_refusal(options["METRICS_REGISTRY"])
    return [*errors, _error(why)] if why else errors


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
        "None for its default registry; METRICS_OTHER: the label of names without a template.",
        id="django_redis_lock.E015",
    )
