from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils.decorators import method_decorator
from django.views import View

from django_redis_lock import locked
from myapp.work import charge_invoice, import_contacts_of, refresh_feed


@locked("invoice:{invoice_id}", timeout=60)
def pay(request, invoice_id):
    charge_invoice(invoice_id)
    return HttpResponse("paid")


# One lock per signed-in user: login_required turns anonymous visitors away first, so no
# two users share a lock (an anonymous user's pk is None).
@login_required
@locked("import-contacts:user:{request.user.pk}")
def import_contacts(request):
    import_contacts_of(request.user)
    return HttpResponse("imported")


@locked("feed:{feed_id}")
async def refresh(request, feed_id):
    await refresh_feed()
    return HttpResponse("refreshed")


@method_decorator(locked("report:{pk}"), name="dispatch")
class ReportView(View):
    def post(self, request, pk):
        return HttpResponse(f"report {pk} built")


@locked("export:{pk}", on_busy=lambda self, request, pk: redirect("export-status", pk))
class ExportView(View):
    async def post(self, request, pk):
        return HttpResponse(f"export {pk} done")
