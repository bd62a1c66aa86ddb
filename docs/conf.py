"""Sphinx configuration of django-redis-lock's documentation (python3 dev.py docs)."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

import django

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]
# The reference reads the package's docstrings, which needs Django set up; no Redis is reached.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django.setup()

project = "django-redis-lock"
author = "The django-redis-lock authors"
copyright = "2026, the django-redis-lock authors"
release = version = metadata.version("django-redis-lock")

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "lockdocs",
]
exclude_patterns = ["_build", "examples"]
# The README is the package's page on PyPI; the site has its own front page.
root_doc = "index"
html_theme = "furo"
html_title = f"django-redis-lock {version}"
html_static_path: list[str] = []
pygments_style = "sphinx"
pygments_dark_style = "monokai"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_preserve_defaults = True
# Names the annotations use only under TYPE_CHECKING: shown as written.
autodoc_type_aliases: dict[str, str] = {}
suppress_warnings = ["config.cache"]
