"""The fencing tests' databases: the suite's SQLite, and a PostgreSQL of their own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from testproject.models import Account
from tests.postgres import missing, postgres_server

#: The alias the PostgreSQL database gets while the tests that use it run.
POSTGRES = "fencing_postgres"


@pytest.fixture(scope="module")
def postgres(django_db_blocker: Any) -> Iterator[str]:
    """The alias of a PostgreSQL database of the tests' own, with the Account table."""
    why = missing()
    if why:
        pytest.skip(why)
    with postgres_server() as database:
        configured = connections.configure_settings({**settings.DATABASES, POSTGRES: database})
        connections.settings[POSTGRES] = configured[POSTGRES]
        try:
            with django_db_blocker.unblock():
                with connections[POSTGRES].schema_editor() as editor:
                    editor.create_model(Account)
                yield POSTGRES
        finally:
            connections[POSTGRES].close()
            del connections[POSTGRES]
            del connections.settings[POSTGRES]


@pytest.fixture
def postgres_db(postgres: str, django_db_blocker: Any) -> Iterator[str]:
    """The PostgreSQL alias for one test, its Account table emptied after it."""
    with django_db_blocker.unblock():
        yield postgres
        Account.objects.using(postgres).all().delete()
        connections[postgres].close()
