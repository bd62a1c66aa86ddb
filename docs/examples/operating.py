from django_redis_lock import get_lock_manager, lock


def show_held_invoices():
    manager = get_lock_manager()  # or get_lock_manager("locks")
    for info in manager.list("invoice:*"):  # a generator over SCAN; globs match names
        print(info.name, info.owner, info.label, info.acquired_at, info.ttl, info.fencing_token)


def release_stuck(name, token):
    manager = get_lock_manager()
    info = manager.get(name)  # exact name: glob characters are literal here
    if info is not None and info.fencing_token == token:
        # Only that hold: a lock that changed hands since stays with its new holder.
        released = manager.force_release(name, fencing_token=token)
        return released is not None and released.handed_over
    return False


def clear_temporary():
    return get_lock_manager().clear("tmp:*")  # how many holds were released


def first_page():
    page = get_lock_manager().page("report:*", cursor="")
    return [info.name for info in page.locks], page.next_cursor  # "": the last page


def report_statistics():
    for stats in get_lock_manager().stats("report:*"):
        print(stats.name, stats.acquisitions, stats.hold_p99, stats.suggested_timeout)
    return lock("report:daily").stats()  # one name's LockStats, or None
