"""How @locked turns a call's arguments into a lock name.

A name is a constant, a callable of the call's arguments, or a template such as
``"invoice:{invoice_id}"`` or ``"user:{request.user.pk}"``. A template is checked once, when a
callable is decorated: its fields name the call's arguments and may reach into them by attribute
and index, never through a name that starts with ``_`` (lock names are shown to operators).

Distinct arguments give distinct names. In a template with two or more fields, each value is
escaped before it is put in: ``%`` and every character of the text between fields are written
as ``%`` and the character's UTF-8 bytes in hex, as in URLs. ``"export:{user}:{fmt}"`` gives
``export:a%3Ab:c`` for ``("a:b", "c")`` and ``export:a:b%3Ac`` for ``("a", "b:c")``. The text
between two fields can then always be told apart from a value, provided there is some (``{a}{b}``
is refused) and it does not start with ``%``. A template with one field, a constant and a
callable's name are used as they are.
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django_redis_lock.validation import validate_name

_CONVERSIONS: dict[str, Callable[[object], str]] = {"r": repr, "s": str, "a": ascii}
# A field name: the argument, then .attribute and [index] steps (an index may hold '.' or '[').
_FIELD_NAME = re.compile(r"([^.[]*)((?:\.[^.[]+|\[[^\]]+\])*)")
_STEP = re.compile(r"\.([^.[]+)|\[([^\]]+)\]")

#: A lock name: a constant, a template of the call's arguments, or a callable of them.
NameSpec = str | Callable[..., str]
#: What @locked takes: a lock name, or a list (or tuple) of constants and templates, taken
#: together with ``lock_many``.
NamesSpec = NameSpec | list[str] | tuple[str, ...]

#: Starts the escape of a character in a template's value; escaped itself.
ESCAPE = "%"


class InvalidName(ValueError):
    """The name made from a call's arguments is not a usable lock name (too long, empty...)."""


@dataclass(frozen=True)
class _Field:
    """A replacement field: the argument it names, the path into it, how it is formatted."""

    root: str
    path: tuple[tuple[bool, str | int], ...]  # (attribute?, attribute name or index) in order
    conversion: str | None
    format_spec: str

    def format(self, values: Mapping[str, Any]) -> str:
        value = values[self.root]
        for is_attribute, key in self.path:
            value = getattr(value, str(key)) if is_attribute else value[key]
        if self.conversion is not None:
            value = _CONVERSIONS[self.conversion](value)
        return format(value, self.format_spec)


def _split_field_name(field_name: str) -> tuple[str, tuple[tuple[bool, str | int], ...]]:
    """``"a.b[c][0]"`` as ``("a", ((True, "b"), (False, "c"), (False, 0)))``: the argument,
    then each attribute (True) or index (False), read as str.format reads them."""
    match = _FIELD_NAME.fullmatch(field_name)
    if match is None:
        raise ValueError(
            f"{{{field_name}}} is not an argument followed by .attributes or [indexes]"
        )
    root, steps = match.groups()
    path = tuple(
        (True, attribute) if attribute else (False, int(index) if index.isdecimal() else index)
        for attribute, index in _STEP.findall(steps)
    )
    return root, path


class _Template:
    """A name template, checked when it is decorated; formats and escapes the fields.

    Without a signature (``method_decorator`` knows it only per request), the arguments the
    fields name are not checked; everything else is.
    """

    def __init__(self, template: str, signature: inspect.Signature | None, where: str) -> None:
        if not template:
            raise ValueError("A lock name must not be empty.")
        self.template = template
        self.literals: list[str] = []  # the text before each field, then the text after
        self.fields: list[_Field] = []
        try:
            self._parse(signature, where)
        except ValueError as exc:
            raise ValueError(f"The lock name template {template!r}: {exc}") from None
        escaped = {ESCAPE, *"".join(self.literals[1:-1])} if len(self.fields) > 1 else set()
        self._escapes = {ord(c): "".join(f"%{b:02X}" for b in c.encode()) for c in escaped}

    def _parse(self, signature: inspect.Signature | None, where: str) -> None:
        text = ""
        for literal, field_name, format_spec, conversion in string.Formatter().parse(self.template):
            text += literal
            if field_name is None:
                continue
            if self.fields and not text:
                raise ValueError(
                    "two fields side by side could not be told apart; put text between them"
                )
            if self.fields and text.startswith(ESCAPE):
                raise ValueError(f"the text between two fields must not start with {ESCAPE!r}")
            if format_spec and "{" in format_spec:
                raise ValueError("a format spec must not contain fields")
            if conversion is not None and conversion not in _CONVERSIONS:
                raise ValueError(f"unknown conversion {conversion!r}")
            self.literals.append(text)
            self.fields.append(
                self._field(field_name, format_spec or "", conversion, signature, where)
            )
            text = ""
        self.literals.append(text)
        if "".join(self.literals):
            validate_name("".join(self.literals))

    @staticmethod
    def _field(
        field_name: str,
        format_spec: str,
        conversion: str | None,
        signature: inspect.Signature | None,
        where: str,
    ) -> _Field:
        root, path = _split_field_name(field_name)
        if not root or root.isdecimal():
            raise ValueError("fields must name arguments, as in 'invoice:{pk}'")
        names = [root, *(str(key) for _, key in path)]
        private = next((name for name in names if name.startswith("_")), None)
        if private is not None:
            raise ValueError(
                f"{{{field_name}}} reads {private!r}: names starting with '_' are refused, "
                "as lock names are shown to operators"
            )
        if signature is None:
            return _Field(root, path, conversion, format_spec)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        if root not in signature.parameters and not takes_any:
            raise ValueError(
                f"{{{field_name}}} names {root!r}, which {where} does not take (it takes: "
                f"{', '.join(signature.parameters) or 'nothing'})"
            )
        return _Field(root, path, conversion, format_spec)

    def format(self, values: Mapping[str, Any]) -> str:
        parts = [self.literals[0]]
        for field, literal in zip(self.fields, self.literals[1:], strict=True):
            parts += (field.format(values).translate(self._escapes), literal)
        return "".join(parts)


def check_template(template: str) -> None:
    """Refuse (ValueError) a template that no callable's arguments could make usable."""
    _Template(template, None, "")


class Naming:
    """Turns a call's arguments into its lock name; checks the name's spec when created.

    Raises :class:`InvalidName` when the arguments make a name that is not usable.
    """

    def __init__(self, spec: NameSpec, signature: inspect.Signature, where: str) -> None:
        self._signature = signature
        self._callable: Callable[..., str] | None = None
        self._template: _Template | None = None
        self._constant: str | None = None
        self._var_keyword = next(
            (p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD), None
        )
        if callable(spec):
            self._callable = spec
        else:
            self._template = _Template(spec, signature, where)
            if not self._template.fields:
                self._constant = self._template.literals[0]
        # A callable, or attribute or index access, may touch the database (request.user):
        # async callers compute such names in a thread.
        fields = self._template.fields if self._template is not None else []
        #: The name's template as written (a constant name is its own): the ``lock`` label
        #: of the metrics; None for a callable.
        self.template = self._template.template if self._template is not None else None
        self.needs_thread = self._callable is not None or any(field.path for field in fields)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        if self._constant is not None:
            return self._constant
        if self._callable is not None:
            name = self._callable(*args, **kwargs)
        else:
            name = self._format(args, kwargs)
        try:
            return validate_name(name)  # a TypeError (not a str) is the callable's fault
        except ValueError as exc:
            raise InvalidName(str(exc)) from None

    def _format(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        assert self._template is not None
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        if self._var_keyword is not None:
            values.update(values.pop(self._var_keyword, {}))
        missing = [field.root for field in self._template.fields if field.root not in values]
        if missing:
            raise TypeError(
                f"The lock name template {self._template.template!r} names {missing[0]!r}, "
                "which this call did not pass."
            )
        return self._template.format(values)


class ManyNaming:
    """Turns a call's arguments into the names of a ``lock_many`` set, one :class:`Naming`
    per constant or template; raises :class:`InvalidName` when two of them make one name."""

    def __init__(
        self, specs: list[str] | tuple[str, ...], signature: inspect.Signature, where: str
    ) -> None:
        self._parts = [Naming(spec, signature, where) for spec in specs]
        #: The templates as written, joined: the ``lock`` label of the metrics.
        self.template = ", ".join(str(part.template) for part in self._parts)
        self.needs_thread = any(part.needs_thread for part in self._parts)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:
        names = tuple(part(args, kwargs) for part in self._parts)
        if len(set(names)) != len(names):
            raise InvalidName(f"The names {names!r} of one lock_many set repeat a name.")
        return names
