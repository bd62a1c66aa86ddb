"""The reader's model for the fencing examples: here the demo project's ``Account`` (a
``FenceField``, ``FencedModelMixin`` and ``FencedQuerySet``; shown on the fencing page), which
the tests migrate, so that the examples import it as a reader's code would, from its app."""

from testproject.models import Account

__all__ = ["Account"]
