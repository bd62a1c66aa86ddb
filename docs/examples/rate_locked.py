from celery import shared_task
from django.http import JsonResponse

from django_redis_lock import locked
from myapp.work import call_partner_api, send_sms


# A search a second per user, and up to 10 more at once after a quiet spell, whichever
# server answers: over that, 429 Too Many Requests with a Retry-After header.
@locked("search:user:{request.user.pk}", rate="60/m", burst=10)
def search(request):
    return JsonResponse({"results": []})


# 100 calls a minute to the partner's API from every worker together. A task over the rate is
# sent again for its turn: never dropped, no worker asleep, and not counted as a retry.
@shared_task
@locked("partner-api", rate="100/m")
def push_order(order_id):
    call_partner_api(order_id)


# A plain function waits up to 5 s for its turn, else raises RateLimited.
@locked("sms", rate="1/s", blocking_timeout=5)
def text(number, message):
    send_sms(number, message)
