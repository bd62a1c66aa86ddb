from django.http import HttpResponse

from django_redis_lock import locked, rwlock, semaphore
from myapp.work import build_report, read_document, write_document


def build(report_id):
    # At most three report builds at once, across every process and machine.
    with semaphore("report-builds", 3, label=f"report {report_id}"):
        build_report()


def show(document_id):
    with rwlock(f"document:{document_id}").read():  # with any other readers
        return read_document(document_id)


def edit(document_id, text):
    with rwlock(f"document:{document_id}").write() as held:  # alone: no reader, no writer
        write_document(document_id, text, fence=held.fencing_token)


# Two exports at once; a third request meanwhile gets 423 Locked with a Retry-After.
@locked("exports", limit=2)
def export(request):
    return HttpResponse("exported")
