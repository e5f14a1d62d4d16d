// The log's quick example: ensure the topic quickstart/orders with 2 partitions,
// publish orders as JSON, read them back with a named cursor and print each total.
//
// Embedded (no server): node examples/quickstart.mjs [DATA_DIR]
// Against a server:     node examples/quickstart.mjs rill://127.0.0.1:7171
//
// The topic is the example's own (the README's CLI quickstart fills shop/orders with
// plain text, which is no JSON order), and so is the cursor file of each target
// (quickstart-cursor-node-embedded.json, quickstart-cursor-node-127.0.0.1_7171.json,
// in the current directory): one target's position means nothing in another's log.
import fs from 'node:fs'
import { Rill } from '../index.mjs'

const target = process.argv[2] ?? './quickstart-data'
const client = target.startsWith('rill') ? await Rill.connect(target) : await Rill.open(target)
const ORDER_CODEC = {
  encode: (order) => new TextEncoder().encode(JSON.stringify(order)),
  decode: (bytes) => JSON.parse(new TextDecoder().decode(bytes)),
}
const orders = client.stream('quickstart').topic('orders').json(ORDER_CODEC)
await orders.ensure(2)

for (let id = 1; id <= 5; id++) {
  const order = { id, customer: `customer-${id % 2}`, total: 10 * id }
  // Orders of one customer keep their order: they share a partition.
  const at = await orders.publish().value(order).key(order.customer).send()
  console.log(`published order ${id} at partition ${at.partition} offset ${at.offset}`)
}

// A named cursor: the position is ours to keep (here, in a file of this target's).
const slug = target.startsWith('rill')
  ? target.split('://').pop().replace(/[^A-Za-z0-9.]/g, '_')
  : `embedded${target === './quickstart-data' ? '' : `-${target.replace(/[^A-Za-z0-9.]/g, '_')}`}`
const cursorFile = `./quickstart-cursor-node-${slug}.json`
const saved = fs.existsSync(cursorFile) ? JSON.parse(fs.readFileSync(cursorFile, 'utf8')) : undefined
const replay = orders.records('log-example', { offsets: saved })
let read = 0
for (const result of await replay.poll()) {
  if (result.kind === 'record') {
    const { value, partition, offset } = result.record
    console.log(`order ${value.id} of ${value.customer}: total ${value.total} (partition ${partition} offset ${offset})`)
    read++
  } else {
    console.error(`skipped: ${result.error.message}`)
  }
}
fs.writeFileSync(cursorFile, JSON.stringify(replay.offsets()))
console.log(`read ${read} orders`)
await client.close()
