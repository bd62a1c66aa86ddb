"""What the admin's pages carry in their forms and URLs, and how they render: a lock selection
as a form value, a lock name as a URL segment, a search box query as a glob. Each survives HTML,
form and URL encoding whatever the name holds (newlines, NUL, slashes, "..")."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote as url_quote
from urllib.parse import unquote as url_unquote

from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.template.response import TemplateResponse

from django_redis_lock.backends.base import glob_escape
from django_redis_lock.display import safe_text
from django_redis_lock.validation import MAX_PATTERN_LENGTH, shorten

#: Names, owners and labels are cut to this many characters in the list and confirmation.
LIST_TEXT_LIMIT = 100

_GLOB_CHARACTERS = frozenset("*?[")
# [token:]quoted name (64 bits), or rate:quoted name.
_SELECTION = re.compile(r"(?:(-?[0-9]{1,18}|rate):)?([^:]*)")
#: What a selection of a rate limit has for a fencing token (see :func:`form_value`).
RATE = "rate"


def form_value(name: str, fencing_token: int | str | None = None) -> str:
    """A lock name as a form value that survives HTML and form encoding (newlines, NUL...),
    with the fencing token of the hold it means when given, or :data:`RATE` for the rate
    limit of that name."""
    encoded = url_quote(name, safe="")
    return encoded if fencing_token is None else f"{fencing_token}:{encoded}"


def from_form_value(value: str) -> tuple[str, int | str | None]:
    """The name and fencing token (None: any hold; :data:`RATE`: its rate limit) of a
    :func:`form_value`."""
    match = _SELECTION.fullmatch(value)
    if match is None:
        raise ValueError(f"Not a lock selection: '{value[:100]}'.")  # shown through safe_text
    token, encoded = match.groups()
    if token == RATE:
        return url_unquote(encoded), RATE
    return url_unquote(encoded), int(token) if token else None


# "." and ".." would be taken for path steps, "stats" for the statistics page; admin quoting
# never yields "_" then a lowercase letter, so these stand for them without clashing with any
# other name.
_STAND_INS = {".": "_dot", "..": "_dotdot", "stats": "_stats"}


def detail_path_segment(name: str) -> str:
    """The name as the admin quotes it for its URL (see :func:`name_from_segment`)."""
    return _STAND_INS.get(name) or quote(name)


def name_from_segment(segment: str) -> str:
    """The lock name of a :func:`detail_path_segment`."""
    for name, stand_in in _STAND_INS.items():
        if segment == stand_in:
            return name
    return unquote(segment)


def search_pattern(query: str) -> str:
    """The glob for a search box query: as typed when it has glob characters, else contains."""
    if _GLOB_CHARACTERS & set(query):
        return query
    return f"*{glob_escape(query)}*"


def shown(text: str, limit: int | None = LIST_TEXT_LIMIT) -> str:
    """``text`` safe for operators, cut to ``limit`` characters (None: whole)."""
    text = safe_text(text)
    return text if limit is None else shorten(text, limit)


def query_of(request: HttpRequest) -> str:
    """The search box's query, cut just past the longest pattern: a longer one is refused
    (400), and the page that says so does not echo all of it."""
    return request.GET.get("q", "").strip()[: MAX_PATTERN_LENGTH + 1]


def unlistable(error: ImproperlyConfigured) -> str:
    """What the list pages say when the cache's key function hides lock names."""
    return (
        f"{error} Single locks still work, and a lock whose name you know can be released with "
        "`manage.py locks release NAME` (system check django_redis_lock.W002)."
    )


def render(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    error: str | None = None,
    status: int = 200,
) -> TemplateResponse:
    """One of the pages' templates (``admin/django_redis_lock/lock/<template>.html``)."""
    return TemplateResponse(
        request,
        f"admin/django_redis_lock/lock/{template}.html",
        {**context, "error": error},
        status=status,
    )
