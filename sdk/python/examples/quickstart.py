"""The log's quick example: ensure the topic quickstart/orders with 2 partitions,
publish orders as JSON, read them back with a named cursor and print each total.

Embedded (no server): python examples/quickstart.py
Against a server:     python examples/quickstart.py rill://127.0.0.1:7171

The topic is the example's own (the README's CLI quickstart fills shop/orders with
plain text, which is no JSON order), and so is the cursor file of each target
(quickstart-cursor-python-embedded.json, quickstart-cursor-python-127.0.0.1_7171.json):
one target's position means nothing in another's log.
"""

import asyncio
import dataclasses
import json
import pathlib
import re
import sys

import rill


@dataclasses.dataclass
class Order:
    id: int
    customer: str
    total: float


async def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else None
    if url is not None:
        client = await rill.connect(url)
    else:
        client = await rill.open("./quickstart-data")
    orders = client.stream("quickstart").topic("orders", cls=Order)
    await orders.ensure(partitions=2)

    for id in range(1, 6):
        order = Order(id=id, customer=f"customer-{id % 2}", total=10.0 * id)
        # Orders of one customer keep their order: they share a partition.
        at = await orders.publish(order).key(order.customer).send()
        print(f"published order {id} at partition {at.partition} offset {at.offset}")

    # A named cursor: the position is ours to keep (here, in a file of this target's).
    cursor = cursor_file(url)
    saved = json.loads(cursor.read_text()) if cursor.exists() else None
    reader = orders.records("quickstart", offsets=saved)
    while (record := await reader.next()) is not None:
        o = record.value
        print(f"order {o.id} of {o.customer}: total {o.total:.2f}")
    cursor.write_text(json.dumps(reader.offsets()))
    await client.close()


def cursor_file(url: "str | None") -> pathlib.Path:
    """The cursor file of a target: embedded, or the server's address."""
    if url is None:
        target = "embedded"
    else:
        target = re.sub(r"[^A-Za-z0-9.]", "_", url.split("://", 1)[-1])
    return pathlib.Path(f"./quickstart-cursor-python-{target}.json")


if __name__ == "__main__":
    asyncio.run(main())
