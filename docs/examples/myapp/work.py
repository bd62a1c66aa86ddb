"""Stand-ins for the work the examples protect."""

from __future__ import annotations

from myapp import record


def charge_invoice(invoice_id: int) -> None:
    record("charge_invoice", invoice_id)


async def acharge_invoice(invoice_id: int) -> None:
    record("acharge_invoice", invoice_id)


def build_report() -> None:
    record("build_report")


async def refresh_feed() -> None:
    record("refresh_feed")


def import_contacts_of(user: object) -> None:
    record("import_contacts_of", user)


def sync_customer_data(customer_id: int) -> None:
    record("sync_customer_data", customer_id)


def rebuild_index() -> None:
    record("rebuild_index")


def send_digest_to(user_id: int) -> None:
    record("send_digest_to", user_id)


def read_document(document_id: int) -> str:
    record("read_document", document_id)
    return "text"


def write_document(document_id: int, text: str, fence: int) -> None:
    record("write_document", (document_id, text, fence > 0))


def run_due_jobs(epoch: int) -> None:
    record("run_due_jobs", epoch > 0)


async def handle_message(message: str, epoch: int) -> None:
    record("handle_message", (message, epoch > 0))


def call_partner_api(order_id: int) -> None:
    record("call_partner_api", order_id)


def send_sms(number: str, message: str) -> None:
    record("send_sms", number)


def move_stock(source: int, target: int, quantity: int, fences: dict[str, int]) -> None:
    record("move_stock", (source, target, quantity, sorted(fences)))


async def amove_stock(source: int, target: int, quantity: int) -> None:
    record("amove_stock", (source, target, quantity))


def build_dashboard(team_id: int) -> dict[str, int]:
    record("build_dashboard", team_id)
    return {"team": team_id, "open_orders": 12}


def compute_sales(year: int, month: int) -> int:
    record("compute_sales", (year, month))
    return 1000 * month
