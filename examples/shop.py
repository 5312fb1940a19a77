# examples/shop.py
import wf


class Inventory:  # a stand-in for your stock service, so this example runs as it is
    def reserve(self, sku: str, qty: int, idempotency_key: str) -> str:
        return f"res-{sku}-{qty}"

    def release(self, reservation: str) -> None:
        print("released", reservation)


class Payments:  # a stand-in for your payment provider
    async def charge(self, order_id: str, cents: int) -> str:
        return f"receipt-{order_id}-{cents}"


inventory, payments = Inventory(), Payments()


@wf.step(max_retries=5)  # retried with exponential backoff and full jitter
def reserve(sku: str, qty: int) -> str:
    return inventory.reserve(sku, qty, idempotency_key=wf.step_id())


@wf.step
async def charge(order_id: str, cents: int) -> str:
    return await payments.charge(order_id, cents)


@wf.step
def release(reservation: str) -> None:
    inventory.release(reservation)


@wf.workflow
async def order(order_id: str, sku: str, qty: int, cents: int) -> str:
    reservation = await reserve(sku, qty)
    wf.rollback(release, reservation)  # compensation if anything later fails
    receipt = await charge(order_id, cents)
    await wf.sleep(2)  # durable: kill the process now and `wf worker` finishes the run
    return receipt
