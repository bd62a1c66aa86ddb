"""The demo's one model: an account written under a lock, fenced by its token (docs/examples)."""

from __future__ import annotations

from django.db import models


class Account(models.Model):
    balance = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    # The fencing token of the last write this row accepted.
    fence = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"account {self.pk}"
