"""The admin page of lock statistics, through the test client, against the suite's Redis."""

from __future__ import annotations

import io
import re

import pytest
import redis
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse
from django.utils.html import escape

from django_redis_lock import lock
from django_redis_lock.admin.charts import CONTENDED_TOP
from django_redis_lock.admin.stats_page import STATS_READ_LIMIT, STATS_ROWS_LIMIT
from django_redis_lock.admin.values import LIST_TEXT_LIMIT
from django_redis_lock.stats import BUCKETS, bucket_label, bucket_of
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests.helpers import hold, keys, record_stats, staff_client

CHANGELIST = "/admin/django_redis_lock/lock/"
STATS = CHANGELIST + "stats/"
pytestmark = pytest.mark.django_db


def _svgs(page: str, kind: str) -> list[str]:
    """The histograms of one kind ("hold" or "wait") on a page, in the order of its rows."""
    return re.findall(rf'<svg class="histogram {kind}".*?</svg>', page, re.DOTALL)


def _names(page: str) -> list[str]:
    """The lock names of the table's rows, in their order."""
    return [
        name.strip() for name in re.findall(r'<th scope="row" class="field-name">([^<]*)', page)
    ]


def test_anonymous_users_go_to_the_login_page(client: Client) -> None:
    response = client.get(STATS)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize(
    ("codenames", "status"), [((), 403), (("delete_lock",), 403), (("view_lock",), 200)]
)
def test_the_view_permission_is_needed(codenames: tuple[str, ...], status: int) -> None:
    assert staff_client(*codenames).get(STATS).status_code == status


def test_the_changelist_links_to_the_page_keeping_its_filter(admin_client: Client) -> None:
    assert reverse("admin:django_redis_lock_lock_stats") == STATS
    assert f'href="{STATS}"' in admin_client.get(CHANGELIST).content.decode()
    page = admin_client.get(CHANGELIST, {"q": "report:*"}).content.decode()
    assert f'href="{STATS}?q=report%3A%2A"' in page


def test_a_lock_named_stats_keeps_its_detail_page(admin_client: Client) -> None:
    hold("stats")
    page = admin_client.get(CHANGELIST).content.decode()
    assert f'<a href="{CHANGELIST}_stats/">stats</a>' in page
    detail = admin_client.get(CHANGELIST + "_stats/")
    assert detail.status_code == 200
    assert "Fencing token" in detail.content.decode()
    assert "Lock statistics" in admin_client.get(STATS).content.decode()


def test_recorded_cycles_are_shown(admin_client: Client) -> None:
    """Real locks, recorded by the real scripts: the counts and a histogram per name."""
    for _ in range(3):
        with lock("nightly", timeout=30):
            assert not lock("nightly").acquire(blocking=False)  # a busy answer
    response = admin_client.get(STATS)
    assert response.status_code == 200
    page = response.content.decode()
    assert _names(page) == ["nightly"]
    row = response.context["rows"][0]
    assert row["numbers"]["acquisitions"] == "3"
    assert row["numbers"]["busy"] == "3"
    assert row["numbers"]["lost"] == "0"
    assert row["numbers"]["timeout"] == "30 s"
    assert row["numbers"]["suggested_timeout"] == ""  # too few holds for advice
    [hold_svg] = _svgs(page, "hold")
    [wait_svg] = _svgs(page, "wait")
    assert "<title>timeout 30 s</title>" in hold_svg
    # Each recorded hold and wait is in one bar's tooltip (their buckets vary with the machine).
    for svg, what in ((hold_svg, "hold"), (wait_svg, "wait")):
        counts = re.findall(rf"<title>[^<]*: (\d+) {what}s?</title>", svg)
        assert sum(map(int, counts)) == 3
        assert len(counts) == svg.count('<rect class="bar"')


def test_the_numbers_and_the_advice(admin_client: Client, redis_client: redis.Redis) -> None:
    record_stats(redis_client, "known", [40] * 90 + [4000] * 9 + [6500], [0.5] * 100, timeout=30)
    record_stats(redis_client, "tight", [9000] * 30, [0.5] * 30, lost=2, timeout=10)
    record_stats(redis_client, "lavish", [150] * 50, [0.5] * 50, timeout=3600)
    response = admin_client.get(STATS)
    rows = {row["name"]: row for row in response.context["rows"]}
    known = rows["known"]["numbers"]
    assert (known["hold_p50"], known["hold_p99"], known["hold_max"]) == ("50 ms", "5 s", "6.5 s")
    assert (known["wait_p50"], known["wait_p99"]) == ("< 1 ms", "< 1 ms")
    assert (known["timeout"], known["suggested_timeout"]) == ("30 s", "11 s")
    assert rows["known"]["warnings"] == ()
    assert any("too short?" in warning for warning in rows["tight"]["warnings"])
    assert any("too long?" in warning for warning in rows["lavish"]["warnings"])
    page = response.content.decode()
    assert page.count('<tr class="flagged">') == 2
    assert page.count('<tr class="advice-row">') == 2
    assert "2 with a timeout that looks wrong" in page
    assert "too short? 2 holds lost" in page
    assert "3 lock names" in page


def test_filter_by_name_or_glob(admin_client: Client, redis_client: redis.Redis) -> None:
    for name in ("report:1", "report:2", "import:7"):
        record_stats(redis_client, name, [10])
    assert _names(admin_client.get(STATS, {"q": "report"}).content.decode()) == [
        "report:1",
        "report:2",
    ]
    assert _names(admin_client.get(STATS, {"q": "*:7"}).content.decode()) == ["import:7"]
    page = admin_client.get(STATS, {"q": "report"}).content.decode()
    assert 'value="report"' in page  # the box keeps the filter
    assert "?q=report&amp;sort=busy" in page  # and so do the sort links


def test_sort_by_any_key(admin_client: Client, redis_client: redis.Redis) -> None:
    record_stats(redis_client, "a", [10] * 5, busy=1, timeout=60)
    record_stats(redis_client, "b", [10] * 50, busy=30, timeout=5)
    record_stats(redis_client, "c", [5000] * 2, busy=7)
    assert _names(admin_client.get(STATS).content.decode()) == ["a", "b", "c"]

    def order(key: str) -> list[str]:
        response = admin_client.get(STATS, {"sort": key})
        assert response.status_code == 200
        return _names(response.content.decode())

    assert order("busy") == ["b", "c", "a"]
    assert order("acquisitions") == ["b", "a", "c"]
    assert order("hold_p99") == ["c", "a", "b"]
    assert order("timeout") == ["a", "b", "c"]  # unknown values last
    page = admin_client.get(STATS, {"sort": "busy"}).content.decode()
    assert '<option value="busy" selected>Busy</option>' in page
    assert 'href="?sort=busy" class="sorted" aria-current="true"' in page


def test_bad_input_is_a_400_that_says_why(admin_client: Client, redis_client: redis.Redis) -> None:
    record_stats(redis_client, "a", [10])
    response = admin_client.get(STATS, {"q": "[ab"})
    assert response.status_code == 400
    assert "without its" in response.content.decode()
    response = admin_client.get(STATS, {"sort": "<b>nonsense</b>" + "x" * 500})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Cannot sort by &#x27;&lt;b&gt;nonsense&lt;/b&gt;" in page
    assert "x" * 100 not in page  # cut
    assert "hold_p99" in page  # the keys it knows
    assert "<b>nonsense" not in page
    assert _names(page) == []


def test_an_empty_state_says_what_would_fill_it(admin_client: Client) -> None:
    hold("held:but:never:released")
    response = admin_client.get(STATS)
    assert response.status_code == 200
    page = response.content.decode()
    assert "No statistics recorded." in page
    assert "after its first release" in page
    assert 'class="histogram' not in page
    assert 'class="contention"' not in page
    page = admin_client.get(STATS, {"q": "report"}).content.decode()
    assert "No statistics recorded for lock names matching “report”." in page


def test_hostile_names_are_escaped_and_cut(admin_client: Client, redis_client: redis.Redis) -> None:
    hostile = "<script>alert(1)</script>\u202e"
    long = "n" * 1024
    record_stats(redis_client, hostile, [10, 2000], busy=3)
    record_stats(redis_client, long, [10], busy=1)
    page = admin_client.get(STATS).content.decode()
    assert "<script>alert" not in page
    assert "\u202e" not in page
    shown = "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e"
    assert f'<th scope="row" class="field-name">{shown}' in page
    assert f'<title id="hold-0-title">Hold times of {shown}</title>' in page  # charts too
    assert f"<title>{shown}: 3 busy answers, 2 acquisitions</title>" in page
    assert "n" * LIST_TEXT_LIMIT not in page
    assert "n" * (LIST_TEXT_LIMIT - 1) + "…" in page


def test_a_bar_per_non_empty_bucket(admin_client: Client, redis_client: redis.Redis) -> None:
    holds = [0.5, 40, 40, 40, 4000, 4000, 7_200_000]
    record_stats(redis_client, "spread", holds, [0.5] * 6 + [250], timeout=30)
    page = admin_client.get(STATS).content.decode()
    [hold_svg] = _svgs(page, "hold")
    [wait_svg] = _svgs(page, "wait")
    assert 'role="img"' in hold_svg
    assert "<desc" in hold_svg
    bars = re.findall(
        r'<rect class="bar" x="([\d.]+)" y="([\d.]+)" width="4" height="([\d.]+)"', hold_svg
    )
    assert len(bars) == 4  # < 1 ms, 30-50 ms, 3-5 s, >= 60 min
    heights = [float(height) for _, _, height in bars]
    assert heights[1] == max(heights) == 36  # the fullest bucket is the tallest
    assert heights[0] == heights[3] == 12
    for index, count in ((0, "1 hold"), (bucket_of(40), "3 holds"), (BUCKETS - 1, "1 hold")):
        assert f"<title>{escape(bucket_label(index))}: {count}</title>" in hold_svg
    assert "<title>timeout 30 s</title>" in hold_svg  # the timeout is drawn on the hold chart
    assert len(re.findall(r'<rect class="bar"', wait_svg)) == 2
    assert "timeout" not in wait_svg


def test_the_most_contended_names_chart(admin_client: Client, redis_client: redis.Redis) -> None:
    for at in range(CONTENDED_TOP + 2):
        record_stats(redis_client, f"queue:{at:02}", [10], busy=at)
    page = admin_client.get(STATS).content.decode()
    [chart] = re.findall(r'<svg class="contention".*?</svg>', page, re.DOTALL)
    shown = re.findall(r"<text x=\"0\" y=\"[\d.]+\">([^<]+)</text>", chart)
    assert shown == [f"queue:{at:02}" for at in range(CONTENDED_TOP + 1, 1, -1)]  # top 10
    widths = re.findall(r'<rect class="bar" x="0" y="[\d.]+" width="([\d.]+)%"', chart)
    assert float(widths[0]) == 85
    assert [float(width) for width in widths] == sorted(map(float, widths), reverse=True)


def test_no_contention_chart_without_busy_answers(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    record_stats(redis_client, "calm", [10])
    page = admin_client.get(STATS).content.decode()
    assert 'class="histogram hold"' in page
    assert 'class="contention"' not in page


def test_the_rows_are_limited_the_chart_counts_every_name(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    with redis_client.pipeline(transaction=False) as pipe:
        for at in range(STATS_ROWS_LIMIT + 5):
            pipe.hset(keys(f"many:{at:04}").stats, mapping={"n": 1, "h1": 1, "b": 0})
        pipe.hset(keys("many:9999").stats, mapping={"n": 1, "h1": 1, "b": 4})
        pipe.execute()
    response = admin_client.get(STATS)
    assert len(response.context["rows"]) == STATS_ROWS_LIMIT
    page = response.content.decode()
    assert f"{STATS_ROWS_LIMIT + 6} lock names" in page
    assert f"the first {STATS_ROWS_LIMIT} shown" in page
    assert "many:9999: 4 busy answers" in page  # beyond the rows, still in the chart


def test_redis_down_is_a_503_with_the_error(
    admin_client: Client, redis_factory: RedisServerGroup
) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        response = admin_client.get(STATS)
    assert response.status_code == 503
    page = response.content.decode()
    assert "Could not read lock statistics" in page
    assert '<p class="errornote">' in page


def test_names_the_key_function_hides_are_a_page_that_says_so(redis_url: str) -> None:
    """Not a 500 (issue 21): the list and the statistics say why they cannot list."""
    caches = build_caches(redis_url)
    caches["default"]["KEY_FUNCTION"] = "tests.ops.test_checks.hashed_key"
    client = staff_client("view_lock")
    with override_settings(CACHES=caches):
        for page in (CHANGELIST, STATS):
            response = client.get(page)
            assert response.status_code == 200
            assert "does not keep key text" in response.content.decode()


def test_an_error_page_does_not_echo_a_huge_query(admin_client: Client) -> None:
    query = "[" + "a" * 100_000
    for page in (CHANGELIST, STATS):
        response = admin_client.get(page, {"q": query})
        assert response.status_code == 400
        assert len(response.content) < 30_000
        assert "pattern is at most 2048 characters" in response.content.decode()


def test_holds_released_by_an_operator_are_shown_apart(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    record_stats(redis_client, "operated", [50] * 30, forced=2, timeout=10)
    page = admin_client.get(STATS).content.decode()
    assert "+2 released by an operator" in page
    assert "too short?" not in page  # forced holds flag nothing (no "- !")
    assert 'class="flag"' not in page


def test_a_view_reads_a_bounded_number_of_names(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    """Past STATS_READ_LIMIT names the page stops reading and says so (issue 21)."""
    pipe = redis_client.pipeline(transaction=False)
    for i in range(STATS_READ_LIMIT + 50):
        pipe.hset(keys(f"many:{i:05}").stats, mapping={"n": 1, "h3": 1, "b": i % 5})
    pipe.execute()
    page = admin_client.get(STATS, {"sort": "busy"}).content.decode()
    assert f"The first {STATS_READ_LIMIT} lock names read, of more" in page
    assert len(_names(page)) == STATS_ROWS_LIMIT


def test_a_time_under_a_millisecond_reads_the_same_for_holds_and_waits(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    """An uncontended acquire released at once: its hold (0 ms, the longest) and its wait
    (no bucket written: under a millisecond) are both in the first bucket."""
    redis_client.hset(keys("quick").stats, mapping={"n": 1, "h0": 1, "m": 0, "t": 30_000})
    numbers = admin_client.get(STATS).context["rows"][0]["numbers"]
    times = ("hold_p50", "hold_p99", "hold_max", "wait_p50", "wait_p99")
    assert {key: numbers[key] for key in times} == dict.fromkeys(times, "< 1 ms")
    out = io.StringIO()
    call_command("locks", "stats", stdout=out)
    (line,) = [each for each in out.getvalue().splitlines() if each.startswith("quick")]
    assert line.split("  ")[0:1] == ["quick"]
    assert line.count("< 1 ms") == 5, line
    assert " 0 ms" not in line
