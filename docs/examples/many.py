from django_redis_lock import current_lock, lock_many, locked
from myapp.work import amove_stock, move_stock


def transfer(source, target, quantity):
    # Both warehouses or neither; another transfer between them, in either direction, waits.
    names = [f"warehouse:{source}", f"warehouse:{target}"]
    with lock_many(names, blocking_timeout=10, label="stock transfer") as held:
        move_stock(source, target, quantity, fences=held.fencing_tokens)


def try_transfer(source, target, quantity):
    held = lock_many([f"warehouse:{source}", f"warehouse:{target}"])
    if not held.acquire(blocking=False):  # one is busy: neither was taken
        return f"busy: {held.busy_name}"
    try:
        move_stock(source, target, quantity, fences=held.fencing_tokens)
    finally:
        held.release()
    return "moved"


async def atransfer(source, target, quantity):
    async with lock_many([f"warehouse:{source}", f"warehouse:{target}"]):
        await amove_stock(source, target, quantity)


# The same with @locked: a list of names or templates; current_lock() is the MultiLock.
@locked(["warehouse:{source}", "warehouse:{target}"], blocking_timeout=10)
def restock(source, target, quantity):
    move_stock(source, target, quantity, fences=current_lock().fencing_tokens)
