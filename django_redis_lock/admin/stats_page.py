"""The admin's statistics page (``stats/``): per lock name what ``manage.py locks stats`` shows,
with the hold and wait histograms and the most contended names drawn by the server as inline
SVG: no script, and the admin's own colours, so it follows its light and dark themes."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlencode

from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest, HttpResponse

from django_redis_lock.admin import charts
from django_redis_lock.admin.charts import CONTENDED_TOP
from django_redis_lock.admin.values import query_of, render, search_pattern, shown, unlistable
from django_redis_lock.display import safe_text
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.ops.manager import LockManager
from django_redis_lock.stats import (
    MARGIN,
    MIN_SAMPLES,
    SORT_KEYS,
    LockStats,
    duration,
    summarize,
)

#: The statistics page shows this many lock names at most (its chart of the most contended
#: names, and its counts, cover every name it read).
STATS_ROWS_LIMIT = 200
#: The statistics page reads this many names at most: past it, it says so and asks for a
#: narrower search, so that a view's time stays bounded however many names there are.
STATS_READ_LIMIT = 20_000
# The numbers the statistics table shows of each name.
_STATS_NUMBERS = (*(key for key in SORT_KEYS if key != "name"), "suggested_timeout")


def _cell_text(value: float | None) -> str:
    """A number of the statistics table: a count as it is, a time readable, "" (shown as a
    dash) when none is known."""
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else duration(value)


class _AdminPages(Protocol):
    """What the statistics page uses of the admin it is mixed into (LockAdmin)."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

    def manager(self) -> LockManager: ...

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]: ...


class StatsPage:
    """The statistics page of LockAdmin, mixed into it."""

    def stats_view(self: _AdminPages, request: HttpRequest) -> HttpResponse:
        """Per lock name: counts, hold and wait times, timeout advice and histograms; ``q``
        filters the names as on the list of held locks, ``sort`` orders them (SORT_KEYS)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        query = query_of(request)
        sort = request.GET.get("sort", "name")
        context = self._context(
            request,
            "Lock statistics",
            query=query,
            shown_query=shown(query),
            sort=sort,
            sort_keys=SORT_KEYS,
            sort_choices=[(key, key.replace("_", " ").capitalize()) for key in SORT_KEYS],
            sort_links=_sort_links(query, sort),
            margin=f"{MARGIN:g}",
            min_samples=MIN_SAMPLES,
            rows=[],
            contention=None,
        )
        if sort not in SORT_KEYS:
            error = f"Cannot sort by '{shown(sort, 40)}': sort by one of {', '.join(SORT_KEYS)}."
            return render(request, "stats", context, error=error, status=400)
        try:
            found = summarize(
                self.manager().iter_stats(search_pattern(query) if query else "*"),
                sort,
                rows=STATS_ROWS_LIMIT,
                contended=CONTENDED_TOP,
                read_at_most=STATS_READ_LIMIT,
            )
        except ValueError as exc:
            return render(request, "stats", context, error=safe_text(str(exc)), status=400)
        except LockUnavailable as exc:
            return render(request, "stats", context, error=str(exc), status=503)
        except ImproperlyConfigured as exc:  # a KEY_FUNCTION that hides names (W002)
            return render(request, "stats", context, error=unlistable(exc))
        context.update(
            rows=[_stats_row(stats, at) for at, stats in enumerate(found.rows)],
            total=found.read,
            complete=found.complete,
            flagged=found.flagged,
            contention=charts.contention(found.contended, shown),
            rates=any(stats.admitted or stats.limited for stats in found.rows),
            avoided=any(stats.avoided for stats in found.rows),
            limit=STATS_ROWS_LIMIT,
        )
        return render(request, "stats", context)


def _sort_links(query: str, sort: str) -> dict[str, dict[str, Any]]:
    """For each sort key, the link that sorts the table by it, and whether it does now."""
    filtered = {"q": query} if query else {}
    return {
        key: {"url": "?" + urlencode({**filtered, "sort": key}), "current": key == sort}
        for key in SORT_KEYS
    }


def _stats_row(stats: LockStats, at: int) -> dict[str, Any]:
    """What the statistics table shows of one name: its texts safe and cut, the times
    readable, and its two histograms."""
    name = shown(stats.name)
    return {
        "id": at,
        "name": name,
        "numbers": {key: _cell_text(getattr(stats, key)) for key in _STATS_NUMBERS},
        "forced": stats.forced,
        "warnings": stats.warnings,
        "holds": charts.histogram(stats.holds, "hold", name, stats.timeout),
        "waits": charts.histogram(stats.waits, "wait", name),
    }
