"""URLs of tests/rate/views.py, for tests marked ``@pytest.mark.urls("tests.rate.urls")``: an
async twin is at its sync view's path with an "a" in front."""

from __future__ import annotations

from django.urls import path

from tests.rate import views

urlpatterns = [
    path("paced/<str:key>/", views.paced),
    path("apaced/<str:key>/", views.apaced),
    path("method/<str:key>/", views.PacedView.as_view()),
    path("amethod/<str:key>/", views.AsyncPacedView.as_view()),
    path("klass/<str:key>/", views.PacedClassView.as_view()),
    path("aklass/<str:key>/", views.AsyncPacedClassView.as_view()),
    path("patient/<str:key>/", views.patient),
    path("apatient/<str:key>/", views.apatient),
    path("polite/<str:key>/", views.polite),
    path("apolite/<str:key>/", views.apolite),
]
