from django.test import RequestFactory, SimpleTestCase

import views
from django_redis_lock.testing import RedisLockTestMixin, make_busy


class PayTests(RedisLockTestMixin, SimpleTestCase):
    def test_pay_answers_423_while_the_invoice_is_busy(self):
        make_busy("invoice:7")  # released after the test
        response = views.pay(RequestFactory().post("/invoices/7/pay/"), invoice_id=7)
        self.assertEqual(response.status_code, 423)

    def test_pay_answers_200_once_it_is_free(self):
        response = views.pay(RequestFactory().post("/invoices/7/pay/"), invoice_id=7)
        self.assertEqual(response.status_code, 200)
