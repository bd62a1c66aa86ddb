"""The admin page of held locks: list, search, inspect, and release with confirmation.

Locks are read from Redis through the LockManager, a page at a time (SCAN), never from the
database; the unmanaged ``Lock`` model only carries the permissions: ``view_lock`` to see,
``delete_lock`` to release. Each release is written to the admin log with its holder.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import quote as url_quote
from urllib.parse import unquote as url_unquote
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.manager import LockInfo, LockManager, get_lock_manager
from django_redis_lock.models import Lock

#: The action of the changelist's action bar.
RELEASE_ACTION = "release_selected"
_GLOB_CHARACTERS = frozenset("*?[")


def form_value(name: str, fencing_token: int | None = None) -> str:
    """A lock name as a form value that survives HTML and form encoding (newlines, NUL...),
    with the fencing token of the hold it means when given."""
    encoded = url_quote(name, safe="")
    return encoded if fencing_token is None else f"{fencing_token}:{encoded}"


def from_form_value(value: str) -> tuple[str, int | None]:
    """The name and fencing token (None: any hold) of a :func:`form_value`."""
    token, _, encoded = value.rpartition(":")
    if token and not token.isdigit():
        raise ValueError(f"Not a lock selection: {value[:100]!r}.")
    return url_unquote(encoded), int(token) if token else None


# "." and ".." would be taken for path steps; admin quoting never yields "_" then a lowercase
# letter, so these stand for them without clashing with any other name.
_DOT_SEGMENTS = {".": "_dot", "..": "_dotdot"}


def detail_path_segment(name: str) -> str:
    """The name as the admin quotes it for its URL (see :func:`name_from_segment`)."""
    return _DOT_SEGMENTS.get(name) or quote(name)


def name_from_segment(segment: str) -> str:
    """The lock name of a :func:`detail_path_segment`."""
    for name, stand_in in _DOT_SEGMENTS.items():
        if segment == stand_in:
            return name
    return unquote(segment)


def search_pattern(query: str) -> str:
    """The glob for a search box query: as typed when it has glob characters, else contains."""
    if _GLOB_CHARACTERS & set(query):
        return query
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in query)
    return f"*{escaped}*"


@admin.register(Lock)
class LockAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # not subscriptable at run time
    """Held locks from Redis in the admin, without a database table."""

    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Lock | None = None) -> bool:
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
        query = request.GET.get("q", "").strip()
        context = self._context(request, "Held locks", query=query, locks=[], next_url=None)
        try:
            cursor = int(request.GET.get("cursor", "0"))
            page = self.manager().page(
                search_pattern(query) if query else "*", cursor, self.list_per_page
            )
        except ValueError as exc:
            return self._render(request, "change_list", context, error=str(exc), status=400)
        except LockUnavailable as exc:
            return self._render(request, "change_list", context, error=str(exc), status=503)
        if page.next_cursor:
            context["next_url"] = "?" + urlencode({"q": query, "cursor": page.next_cursor})
        context.update(locks=[self._row(info) for info in page.locks], first_page=cursor == 0)
        return self._render(request, "change_list", {**context, **(extra_context or {})})

    def detail_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One held lock with everything known about it, and a release button."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        name = name_from_segment(object_id)
        try:
            info = self.manager().get(name)
        except ValueError as exc:
            raise Http404(str(exc)) from None
        except LockUnavailable as exc:
            context = self._context(request, name, lock=None)
            return self._render(request, "detail", context, error=str(exc), status=503)
        if info is None:
            raise Http404(f"No lock named {name!r} is held.")
        return self._render(request, "detail", self._context(request, name, lock=self._row(info)))

    def _release_action(self, request: HttpRequest) -> HttpResponse:
        """Django's action flow: the selection, a confirmation page, then the release."""
        if request.POST.get("action") != RELEASE_ACTION:
            return self._back(request, "Choose an action.", messages.WARNING)
        if not self.has_delete_permission(request):
            raise PermissionDenied
        manager = self.manager()
        try:
            selected = [from_form_value(v) for v in request.POST.getlist(ACTION_CHECKBOX_NAME)]
            if not selected:
                return self._back(request, "Select the locks to release.", messages.WARNING)
            if request.POST.get("post") != "yes":
                held = [(name, manager.get(name)) for name, _ in selected]
                rows = [
                    (name, info, form_value(name, info.fencing_token) if info else None)
                    for name, info in held
                ]
                context = self._context(request, "Release locks?", held=rows, action=RELEASE_ACTION)
                context["action_checkbox_name"] = ACTION_CHECKBOX_NAME
                return self._render(request, "release_confirmation", context)
            # Only the holds the operator confirmed: a lock taken over since stays held.
            released = sum(
                self._release(request, manager, name, token)
                for name, token in selected
                if token is not None
            )
        except ValueError as exc:
            return self._back(request, str(exc), messages.ERROR)
        except LockUnavailable as exc:
            return self._back(request, f"Redis is unavailable: {exc}", messages.ERROR)
        skipped = len(selected) - released
        text = f"Released {released} lock{'s' if released != 1 else ''}."
        if skipped:
            text += (
                f" {skipped} {'was' if skipped == 1 else 'were'} not released: no longer held, "
                "or held by someone else than the holder you confirmed."
            )
        return self._back(request, text, messages.SUCCESS if released else messages.WARNING)

    def _release(self, request: HttpRequest, manager: LockManager, name: str, token: int) -> bool:
        info = manager.force_release(name, fencing_token=token)
        if info is None:
            return False
        LogEntry.objects.create(
            user_id=request.user.pk or 0,  # admin views always have a user
            content_type_id=ContentType.objects.get_for_model(Lock).pk,
            object_id=name,
            object_repr=name[:200],
            action_flag=DELETION,
            change_message=(
                f"Released lock {name!r} held by {info.owner} (label: {info.label or '-'}, "
                f"fencing token {info.fencing_token}, acquired {info.acquired_at.isoformat()})."
            ),
        )
        return True

    def _back(self, request: HttpRequest, text: str, level: int) -> HttpResponseRedirect:
        self.message_user(request, text, level)
        query = request.POST.get("q", "")
        url = reverse("admin:django_redis_lock_lock_changelist", current_app=self.admin_site.name)
        return HttpResponseRedirect(url + ("?" + urlencode({"q": query}) if query else ""))

    def _row(self, info: LockInfo) -> dict[str, Any]:
        url = reverse(
            "admin:django_redis_lock_lock_change",
            args=[detail_path_segment(info.name)],
            current_app=self.admin_site.name,
        )
        return {
            "info": info,
            "url": url,
            "value": form_value(info.name),
            "expires": math.isfinite(info.ttl),
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

    def _render(
        self,
        request: HttpRequest,
        template: str,
        context: dict[str, Any],
        *,
        error: str | None = None,
        status: int = 200,
    ) -> TemplateResponse:
        return TemplateResponse(
            request,
            f"admin/django_redis_lock/lock/{template}.html",
            {**context, "error": error},
            status=status,
        )
