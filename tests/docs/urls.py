"""The URLs of the documentation's example views (docs/examples/views.py), for their tests."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import path

from tests.docs.examples import example

views = example("views")

urlpatterns = [
    path("invoices/<int:invoice_id>/pay/", views.pay),
    path("contacts/import/", views.import_contacts),
    path("feeds/<int:feed_id>/refresh/", views.refresh),
    path("reports/<int:pk>/", views.ReportView.as_view()),
    path("exports/<int:pk>/", views.ExportView.as_view()),
    path("exports/<int:pk>/status/", lambda request, pk: HttpResponse(), name="export-status"),
    path("accounts/login/", lambda request: HttpResponse("log in"), name="login"),
]
