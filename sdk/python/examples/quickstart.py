"""The log's quick example: ensure a topic with 2 partitions, publish orders as JSON,
read them back with a named cursor and print each total.

Embedded (no server): python examples/quickstart.py
Against a server:     python examples/quickstart.py rill://127.0.0.1:7171
"""

import asyncio
import dataclasses
import json
import pathlib
import sys

import rill


@dataclasses.dataclass
class Order:
    id: int
    customer: str
    total: float


async def main() -> None:
    if len(sys.argv) > 1:
        client = await rill.connect(sys.argv[1])
    else:
        client = await rill.open("./quickstart-data")
    orders = client.stream("shop").topic("orders", cls=Order)
    await orders.ensure(partitions=2)

    for id in range(1, 6):
        order = Order(id=id, customer=f"customer-{id % 2}", total=10.0 * id)
        # Orders of one customer keep their order: they share a partition.
        at = await orders.publish(order).key(order.customer).send()
        print(f"published order {id} at partition {at.partition} offset {at.offset}")

    # A named cursor: the position is ours to keep (here, in a file).
    cursor = pathlib.Path("./quickstart-cursor.json")
    saved = json.loads(cursor.read_text()) if cursor.exists() else None
    reader = orders.records("quickstart", offsets=saved)
    while (record := await reader.next()) is not None:
        o = record.value
        print(f"order {o.id} of {o.customer}: total {o.total:.2f}")
    cursor.write_text(json.dumps(reader.offsets()))
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
