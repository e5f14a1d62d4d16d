// The production write path: a batching, retrying, idempotent producer.
//
// Embedded: node examples/producer.mjs [DATA_DIR]; against a server: pass rill://HOST:PORT.
import { Rill, HeaderValue, utf8 } from '../index.mjs'

const target = process.argv[2] ?? './producer-data'
const client = target.startsWith('rill') ? await Rill.connect(target) : await Rill.open(target)
const topic = client.stream('bank').topic('transfers')
await topic.ensure(4)
// (With TypeScript or Node >= 24: `await using producer = ...` shuts it down at the
// end of the block.)
const producer = topic.producer({ retries: 3, retryIntervalMs: 1_000, batchLength: 1000, lingerMs: 5 })
try {
  // Sends run concurrently; the producer batches them per partition.
  const sends = []
  for (let i = 0; i < 100; i++) {
    sends.push(producer.send(utf8(`message-${i}`), {
      key: utf8(`account-${i % 10}`),
      headers: { type: HeaderValue.uint16(7), source: 'example' },
    }))
  }
  const positions = await Promise.all(sends)
  const perPartition = {}
  for (const p of positions) perPartition[p.partition] = (perPartition[p.partition] ?? 0) + 1
  console.log(`sent ${positions.length} messages:`, perPartition)
  await producer.flush()
} finally {
  await producer.shutdown() // flushes everything buffered
}
await client.close()
