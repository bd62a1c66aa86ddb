from django_redis_lock import lock
from myapp.work import charge_invoice


def pay(invoice_id):
    with lock(f"invoice:{invoice_id}"):  # waits for the lock, releases it even on errors
        charge_invoice(invoice_id)
