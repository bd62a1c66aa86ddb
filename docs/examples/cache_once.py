from django_redis_lock import acache_once, cache_once, cached_once
from myapp.work import build_dashboard, compute_sales


def dashboard(team_id):
    # On a miss one caller builds it; those that miss meanwhile wait and read its value.
    return cache_once(
        f"dashboard:{team_id}",
        lambda: build_dashboard(team_id),
        timeout=300,
        template="dashboard:{team_id}",  # the label of its metrics
    )


async def adashboard(team_id):
    # A sync compute runs in a thread (it may use the ORM); an async one is awaited.
    return await acache_once(f"dashboard:{team_id}", lambda: build_dashboard(team_id), 300)


@cached_once("sales:{year}:{month}", timeout=3600)
def monthly_sales(year, month):
    return compute_sales(year, month)
