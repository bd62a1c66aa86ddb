r"""Text as operators read it (the admin, ``manage.py locks``): nothing in it can mislead them.

Anyone who can write to Redis chooses the names, owners and labels shown. Characters that
move the cursor, change colours, reorder text (U+202E makes ``invoice<U+202E>gpj.exe`` read as
``invoiceexe.jpg``) or cannot be seen are shown as escapes such as ``\x1b`` or ``\u202e``;
a backslash is doubled, so a literal ``\x1b`` and a real ESC look different.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

# Control characters (C0, DEL, C1), format characters (bidi controls, zero-width ones), lone
# surrogates, and the line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in _HIDDEN_CATEGORIES


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def safe_text(text: str) -> str:
    """``text`` with hidden characters escaped and backslashes doubled, for operators."""
    if text.isprintable() and "\\" not in text:  # the usual case, checked at C speed
        return text
    return "".join(
        "\\\\" if char == "\\" else _escape(char) if _hidden(char) else char for char in text
    )


def _json_escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # JSON spells it as its UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def safe_json(value: Any, **options: Any) -> str:
    """``json.dumps(value)``, readable (non-ASCII text kept) but with hidden characters as
    ``\\uXXXX`` escapes: ``json.loads`` gives back exactly ``value``."""
    text = json.dumps(value, ensure_ascii=False, **options)
    if text.isprintable():
        return text
    # JSON escapes the newlines inside strings itself: a raw one is indentation.
    return "".join(_json_escape(c) if c != "\n" and _hidden(c) else c for c in text)


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless it is one: "1 lock", "3 locks"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
