"""URLs of the demo project: the lock demo page, its Prometheus metrics and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from testproject import views

urlpatterns = [
    path("", views.index, name="demo"),
    path("acquire/", views.acquire, name="demo-acquire"),
    path("release/", views.release, name="demo-release"),
    path("slow-job/<slug:job>/", views.slow_job, name="demo-slow-job"),
    path("metrics", views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
]
