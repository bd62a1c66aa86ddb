"""The unmanaged placeholder model (HeldLock, named Lock in Django): no table, only its
content type and permissions."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Lock",
            fields=[
                ("name", models.CharField(max_length=1024, primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "lock",
                "verbose_name_plural": "locks",
                "managed": False,
                "default_permissions": ("view", "delete"),
            },
        ),
    ]
