// Throughput of the Node.js SDK against a running server, one JSON line per run.
//
// Usage: node bench.mjs produce|consume|group URL [--messages N] [--size BYTES] [--batch N]
//   produce: one producer, `sendBatch` of BATCH records of SIZE bytes, awaited in turn,
//            into a fresh one-partition topic;
//   consume: publishes that topic first (not timed), then one cursor polls it all;
//   group:   the same, read by one consumer-group member (commit policy: polling).
// Prints {"sdk":"node","workload":..,"records":N,"seconds":F,"records_per_s":F,"mb_per_s":F}
// (MB = 10^6 bytes of record values), the fields `rill bench --json` has.
import { randomBytes } from 'node:crypto'
import { Rill } from '../../sdk/node/index.mjs'

const [workload, url, ...rest] = process.argv.slice(2)
const opt = (name, dflt) => {
  const i = rest.indexOf(`--${name}`)
  return i < 0 ? dflt : Number(rest[i + 1])
}
const n = opt('messages', 200_000)
const size = opt('size', 1024)
const batch = opt('batch', 1000)
if (!['produce', 'consume', 'group'].includes(workload) || !url) {
  console.error('usage: bench.mjs produce|consume|group URL [--messages N] [--size B] [--batch N]')
  process.exit(2)
}

function report(records, seconds) {
  console.log(JSON.stringify({
    sdk: 'node', workload, records, size, seconds,
    records_per_s: records / seconds, mb_per_s: records * size / seconds / 1e6,
  }))
}

async function produce(topic) {
  const value = randomBytes(size)
  const messages = Array.from({ length: batch }, () => ({ value }))
  const producer = topic.producer({ batchLength: batch })
  const start = performance.now()
  for (let sent = 0; sent < n; sent += batch) {
    await producer.sendBatch(sent + batch <= n ? messages : messages.slice(0, n - sent))
  }
  const seconds = (performance.now() - start) / 1000
  await producer.shutdown()
  return seconds
}

const client = await Rill.connect(url)
const topic = client.stream('sdk-bench').topic(`node-${workload}-${process.pid}-${Date.now()}`)
await topic.ensure(1)
if (workload === 'produce') {
  report(n, await produce(topic))
} else {
  await produce(topic)
  let seen = 0
  const start = performance.now()
  if (workload === 'consume') {
    const reader = topic.records('bench')
    for (;;) {
      const results = await reader.poll()
      if (results.length === 0) break
      for (const r of results) {
        if (r.kind !== 'record') throw r.error
        seen += 1
      }
    }
  } else {
    const consumer = await topic.consumerGroup('bench', { batchLength: batch, startFrom: { kind: 'first' } })
    while (seen < n) {
      await consumer.nextWithin(30_000)
      seen += 1
    }
    await consumer.shutdown()
  }
  const seconds = (performance.now() - start) / 1000
  if (seen !== n) throw new Error(`read ${seen} of ${n}`)
  report(seen, seconds)
}
await topic.delete()
await client.close()
