"""Whether a decorator's ``using`` names cache aliases that exist: refused as it decorates.

@locked and @unique decorate at import, when a misspelt alias should stop the process, not
fail its first call in production. The settings are read then only if they are loaded already
(``settings.configured``): reading them would otherwise load them in the middle of an import,
perhaps of the settings module itself. A decoration made before that is checked by the system
check ``django_redis_lock.E016`` at startup, and its first call fails as any lock's would.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register

from django_redis_lock.validation import Using

# The decorations made before the settings were loaded: the check's (decorator, using).
_unchecked: list[tuple[str, Using]] = []


def refuse_unknown_aliases(using: Using, decorator: str) -> None:
    """Raise ValueError when ``using`` (checked by validate_using) names an alias not in
    CACHES; ``decorator`` (``"@locked"``) names the caller in the message."""
    if using is None:
        return
    if not settings.configured:
        _unchecked.append((decorator, using))
        return
    why = unknown_aliases(using, decorator)
    if why is not None:
        raise ValueError(why)


def unknown_aliases(using: Using, decorator: str) -> str | None:
    """Why ``using`` cannot be used (an alias not in CACHES), or None."""
    aliases = (using,) if isinstance(using, str) else using or ()
    unknown = [alias for alias in aliases if alias not in settings.CACHES]
    if not unknown:
        return None
    configured = ", ".join(map(repr, settings.CACHES)) or "none"
    names = " and ".join(map(repr, unknown))
    verb = "is not a cache alias" if len(unknown) == 1 else "are not cache aliases"
    return f"{decorator}(using={using!r}): {names} {verb} in CACHES (configured: {configured})."


@register(Tags.caches)
def check_unchecked_aliases(**kwargs: Any) -> list[CheckMessage]:
    """E016: a decoration made before the settings were loaded names an alias not in CACHES."""
    found = (unknown_aliases(using, decorator) for decorator, using in _unchecked)
    return [
        Error(
            why,
            hint="Add the alias to CACHES, or give the decorator one that is there.",
            id="django_redis_lock.E016",
        )
        for why in found
        if why is not None
    ]
