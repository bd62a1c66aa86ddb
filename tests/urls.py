"""URLs of tests/views.py, for tests marked ``@pytest.mark.urls("tests.urls")``.

An async twin is at its sync view's path with an "a" in front (``/pay/``, ``/apay/``).
"""

from __future__ import annotations

from django.urls import path, re_path

from tests import views

urlpatterns = [
    path("pay/<int:invoice_id>/", views.pay),
    path("apay/<int:invoice_id>/", views.apay),
    path("profile/", views.profile),
    path("aprofile/", views.aprofile),
    path("item/<str:item>/", views.by_callable),
    path("aitem/<str:item>/", views.aby_callable),
    path("custom/", views.custom_busy),
    path("acustom/", views.acustom_busy),
    re_path(r"^labelled/(?P<rest>.*)$", views.labelled),
    re_path(r"^alabelled/(?P<rest>.*)$", views.alabelled),
    path("boom/", views.boom),
    path("aboom/", views.aboom),
    path("stream/", views.stream),
    path("astream/", views.astream),
    path("gated/<str:name>/", views.gated),
    path("agated/<str:name>/", views.agated),
    path("report/<int:pk>/", views.ReportView.as_view()),
    path("areport/<int:pk>/", views.AsyncReportView.as_view()),
    path("klass/<int:pk>/", views.ClassDecoratedView.as_view()),
    path("aklass/<int:pk>/", views.AsyncClassDecoratedView.as_view()),
    path("subclass/<int:pk>/", views.SubclassView.as_view()),
    path("asubclass/<int:pk>/", views.AsyncSubclassView.as_view()),
    path("stacked/<int:pk>/", views.StackedReportView.as_view()),
    path("astacked/<int:pk>/", views.AsyncStackedReportView.as_view()),
    # Any slug, the empty one included, for names that come out too long or empty.
    re_path(r"^doc/(?P<slug>.*)/$", views.doc),
    re_path(r"^adoc/(?P<slug>.*)/$", views.adoc),
    re_path(r"^cdoc/(?P<slug>.*)/$", views.DocView.as_view()),
    re_path(r"^acdoc/(?P<slug>.*)/$", views.AsyncDocView.as_view()),
]
