"""The admin page of held locks: list, search, inspect, and release with confirmation.

Locks are read from Redis through the LockManager, a page at a time (SCAN), never from the
database; the unmanaged ``HeldLock`` model only carries the permissions: ``view_lock`` to see,
``delete_lock`` to release. Each release is written to the admin log with its holder. Every
text from Redis is shown through :func:`~django_redis_lock.display.safe_text`, and cut in
the list (the detail page shows it whole), so no content can hide or push away the columns.

The statistics page (``stats/``) shows per lock name what ``manage.py locks stats`` prints,
with the hold and wait histograms and the most contended names drawn by the server as inline
SVG: no script, and the admin's own colours, so it follows its light and dark themes.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse

from django_redis_lock.admin.stats_page import StatsPage
from django_redis_lock.admin.values import (
    LIST_TEXT_LIMIT,
    RATE,
    detail_path_segment,
    form_value,
    from_form_value,
    name_from_segment,
    query_of,
    render,
    search_pattern,
    shown,
    unlistable,
)
from django_redis_lock.display import counted, safe_text
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.models import HeldLock
from django_redis_lock.ops import get_lock_manager
from django_redis_lock.ops.manager import LockManager
from django_redis_lock.ops.quorum_manager import QuorumLockManager
from django_redis_lock.ops.records import LockInfo, Released
from django_redis_lock.validation import shorten

#: The action of the changelist's action bar.
RELEASE_ACTION = "release_selected"
_BAD_CURSOR = (
    "This page link is not valid: its page position is garbled. Start from the first page."
)


@admin.register(HeldLock)
class LockAdmin(StatsPage, admin.ModelAdmin):  # type: ignore[type-arg]  # not subscriptable at run time
    """Held locks from Redis in the admin, without a database table."""

    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: HeldLock | None = None) -> bool:
        return False

    def manager(self) -> LockManager:
        """The manager of the locks shown (the REDIS_LOCK cache)."""
        return get_lock_manager()

    def get_urls(self) -> list[URLPattern]:
        names = self.opts.app_label, self.opts.model_name
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="{}_{}_changelist".format(*names),
            ),
            path(
                "stats/",
                self.admin_site.admin_view(self.stats_view),
                name="{}_{}_stats".format(*names),
            ),
            path(
                "<path:object_id>/",
                self.admin_site.admin_view(self.detail_view),
                name="{}_{}_change".format(*names),
            ),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The held locks, a SCAN page at a time; POST runs the release action."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._release_action(request)
        query = query_of(request)
        context = self._context(
            request, "Held locks", query=query, shown_query=shown(query), locks=[], next_url=None
        )
        try:
            cursor = self._cursor(request.GET.get("cursor", ""))
            page = self.manager().page(
                search_pattern(query) if query else "*", cursor, self.list_per_page
            )
        except ValueError as exc:
            return render(request, "change_list", context, error=str(exc), status=400)
        except LockUnavailable as exc:
            return render(request, "change_list", context, error=str(exc), status=503)
        except ImproperlyConfigured as exc:  # a KEY_FUNCTION that hides names (W002)
            return render(request, "change_list", context, error=unlistable(exc))
        if page.next_cursor:
            context["next_url"] = "?" + urlencode({"q": query, "cursor": page.next_cursor})
        context.update(
            locks=[self._row(info) for info in page.locks],
            first_page=not cursor,
            quorum=isinstance(self.manager(), QuorumLockManager),
            unanswered=[
                {"alias": shown(alias), "error": shown(error)}
                for alias, error in page.unanswered.items()
            ],
        )
        return render(request, "change_list", {**context, **(extra_context or {})})

    def _cursor(self, text: str) -> str:
        """The page cursor of a page link, or a ValueError an operator can read."""
        try:
            return self.manager().check_cursor(text)
        except ValueError:
            raise ValueError(_BAD_CURSOR) from None

    def detail_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One held lock with everything known about it, and a release button."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        name = name_from_segment(object_id)
        context = self._context(request, shown(name), holds=[])  # the heading: cut
        try:
            manager = self.manager()
            holds = manager.holders(name)  # a lock's hold, or a semaphore's holders
            if not holds:
                error = self._not_listed(manager, name)
                return render(request, "detail", context, error=error, status=404)
        except ValueError as exc:
            raise Http404(str(exc)) from None
        except LockUnavailable as exc:
            return render(request, "detail", context, error=str(exc), status=503)
        context["holds"] = [self._row(info, None) for info in holds]
        return render(request, "detail", context)

    def _not_listed(self, manager: LockManager, name: str) -> str:
        """Why the lock ``name`` has no LockInfo: not held, or data this library did not write."""
        if manager.lock(name).locked():
            return (
                f"The lock '{shown(name)}' is held, but its data is not readable (this library "
                "did not write it): release it with `manage.py locks release`."
            )
        return f"No lock named '{shown(name)}' is held."

    def _release_action(self, request: HttpRequest) -> HttpResponse:
        """Django's action flow: the selection, a confirmation page, then the release."""
        if request.POST.get("action") != RELEASE_ACTION:
            return self._back(request, "Choose an action.", messages.WARNING)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        try:
            manager = self.manager()
            selected = [from_form_value(v) for v in request.POST.getlist(ACTION_CHECKBOX_NAME)]
            if not selected:
                return self._back(request, "Select the locks to release.", messages.WARNING)
            if request.POST.get("post") != "yes":
                return self._confirmation(request, manager, selected)
            # Only the holds the operator confirmed: a lock taken over since stays held.
            released = [
                self._release(request, manager, name, token)
                for name, token in selected
                if token is not None
            ]
        except ValueError as exc:
            return self._back(request, safe_text(str(exc)), messages.ERROR)
        except LockUnavailable as exc:
            return self._back(request, f"Redis is unavailable: {exc}", messages.ERROR)
        return self._released(request, [each for each in released if each], len(selected))

    def _confirmation(
        self, request: HttpRequest, manager: LockManager, selected: list[tuple[str, Selected]]
    ) -> HttpResponse:
        """The page that asks before releasing: who holds each lock, and what happens."""
        rows = []
        for name, token in selected:
            holds = manager.holders(name)
            info = _chosen(holds, token)
            if token == RATE and info is None:
                rows.append(
                    {"name": shown(name), "why": f"No rate limit '{shown(name)}' is active."}
                )
                continue
            if info is None:
                why = (
                    f"'{shown(name)}' has {len(holds)} holders: release one from its page."
                    if token is None and len(holds) > 1
                    else self._not_listed(manager, name)
                )
                rows.append({"name": shown(name), "why": why})
            else:
                value = form_value(name, RATE if info.rate else info.fencing_token)
                rows.append({**self._row(info), "value": value})
        context = self._context(request, "Release locks?", held=rows, action=RELEASE_ACTION)
        context["action_checkbox_name"] = ACTION_CHECKBOX_NAME
        return render(request, "release_confirmation", context)

    def _released(
        self, request: HttpRequest, released: list[Released], selected: int
    ) -> HttpResponseRedirect:
        """Back to the list, saying what was released and who took it over."""
        count, handed = len(released), sum(each.handed_over for each in released)
        text = f"Released {counted(count, 'lock')}"
        if handed:
            by = "a waiting client" if handed == 1 else "waiting clients"
            text += f"; {handed} taken over at once by {by}."
        elif count:
            text += f"; no client was waiting for {'it' if count == 1 else 'them'}."
        else:
            text += "."
        if selected > count:
            skipped = selected - count
            text += (
                f" {skipped} {'was' if skipped == 1 else 'were'} not released: no longer held, "
                "or held by someone else than the holder you confirmed."
            )
        return self._back(request, text, messages.SUCCESS if count else messages.WARNING)

    def _release(
        self, request: HttpRequest, manager: LockManager, name: str, token: int | str
    ) -> Released | None:
        """Release the hold ``token`` of ``name``, or reset its rate limit (:data:`RATE`)."""
        if isinstance(token, str):
            released = manager.reset_rate(name)
        else:
            released = manager.force_release(name, fencing_token=token)
        if released is not None:
            self._log(request, released)
        return released

    def _log(self, request: HttpRequest, released: Released) -> None:
        """Write a release to the admin log (Recent actions): which lock, and who held it."""
        name, info = safe_text(released.name), released.info
        holder = f"held by {safe_text(info.owner)}" if info else "whose data was not readable"
        if info and info.rate:  # a rate limit reset: no holder, how full it was
            holder = f"{info.rate.shown}"
        if info and info.held_as:  # one holder of several: which kind of hold
            holder = f"[{info.held_as}] {holder}"
        details = (
            f" (label: {safe_text(info.label or '-')}, fencing token {info.fencing_token}, "
            f"acquired {info.acquired_at.isoformat()})"
            if info and not info.rate
            else ""
        )
        taken = "; a waiting client took it over at once" if released.handed_over else ""
        LogEntry.objects.create(
            user_id=request.user.pk or 0,  # admin views always have a user
            content_type_id=ContentType.objects.get_for_model(HeldLock).pk,
            object_id=released.name,
            object_repr=shorten(f"Released {name} {holder}", 200),
            action_flag=DELETION,  # the hold is gone: Recent actions shows it without a link
            change_message=f"Released lock '{name}' {holder}{details}{taken}.",
        )

    def _back(self, request: HttpRequest, text: str, level: int) -> HttpResponseRedirect:
        self.message_user(request, text, level)
        query = request.POST.get("q", "")
        url = reverse("admin:django_redis_lock_lock_changelist", current_app=self.admin_site.name)
        return HttpResponseRedirect(url + ("?" + urlencode({"q": query}) if query else ""))

    def _row(self, info: LockInfo, limit: int | None = LIST_TEXT_LIMIT) -> dict[str, Any]:
        """What a template shows of ``info``: its texts safe, and cut to ``limit``."""
        url = reverse(
            "admin:django_redis_lock_lock_change",
            args=[detail_path_segment(info.name)],
            current_app=self.admin_site.name,
        )
        return {
            "info": info,
            "name": shown(info.shown_name, limit),
            "owner": shown(info.owner, limit),
            "label": shown(info.label, limit) if info.label else None,
            "url": url,
            # A lock: whichever hold it has when confirmed; a semaphore's: this holder.
            "value": form_value(info.name, _selection(info)),
            "rate": info.rate.shown if info.rate else None,
            "expires": math.isfinite(info.ttl),
            "primaries": ", ".join(info.primaries),
        }

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "has_view_permission": True,
            "can_release": self.has_delete_permission(request),
            **extra,
        }


# A selection's token: a hold's fencing token, None (whichever), RATE (the rate limit).
Selected = int | str | None


def _selection(info: LockInfo) -> Selected:
    """What a row selects: a lock's whichever hold, a holder by its token, a rate limit."""
    if info.kind == "rate":
        return RATE
    return None if info.kind == "lock" else info.fencing_token


def _chosen(holds: list[LockInfo], token: Selected) -> LockInfo | None:
    """The hold a selection names: the one with ``token``; the rate limit for RATE; without
    one, the lock's hold (or the only holder)."""
    if token == RATE:
        return next((info for info in holds if info.kind == "rate"), None)
    holds = [info for info in holds if info.kind != "rate"]
    if token is not None:
        return next((info for info in holds if info.fencing_token == token), None)
    locks = [info for info in holds if info.kind == "lock"]
    return (locks or holds)[0] if len(locks) == 1 or len(holds) == 1 else None
