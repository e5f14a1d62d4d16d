// Throughput of the Node.js SDK against a running server, one JSON line per run.
//
// Usage: node bench.mjs produce|consume|group URL [--messages N] [--size BYTES] [--batch N]
//   produce: one producer, `sendBatch` of BATCH records of SIZE bytes, awaited in turn,
//            into a fresh one-partition topic; a tenth more records first, untimed, as
//            the warm-up part of `rill bench produce`;
//   consume: publishes that topic first (not timed, with a tenth more as a warm-up part,
//            as `rill bench consume` does), then one cursor reads it with `poll()`; the
//            clock starts with the first batch after the warm-up part;
//   group:   the same, read by one consumer-group member's `poll()` (commit policy:
//            the default).
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

// Sends `warm` records untimed (a warm-up part), then `n` timed; the seconds of the
// timed part.
async function produce(topic, n, warm = 0) {
  const value = randomBytes(size)
  const messages = Array.from({ length: batch }, () => ({ value }))
  const producer = topic.producer({ batchLength: batch })
  const send = async (count) => {
    for (let sent = 0; sent < count; sent += batch) {
      await producer.sendBatch(sent + batch <= count ? messages : messages.slice(0, count - sent))
    }
  }
  await send(warm)
  const start = performance.now()
  await send(n)
  const seconds = (performance.now() - start) / 1000
  await producer.shutdown()
  return seconds
}

const client = await Rill.connect(url)
const topic = client.stream('sdk-bench').topic(`node-${workload}-${process.pid}-${Date.now()}`)
// As `rill bench` makes its topic: one partition, durability never.
await topic.create({ partitions: 1, durability: 'never' })
if (workload === 'produce') {
  // A tenth more first, untimed, as `rill bench produce` warms up.
  report(n, await produce(topic, n, Math.floor(n / 10)))
} else {
  // As `rill bench consume` does: a warm-up part is read first; the clock starts with
  // the first batch after it and counts the records from there.
  const warm = Math.floor(n / 10)
  const total = warm + n
  await produce(topic, total)
  let seen = 0
  let start = 0
  let atStart = 0
  const count = (batch) => {
    for (const r of batch) if (r.kind !== 'record') throw r.error
    if (seen < warm && warm <= seen + batch.length) {
      start = performance.now()
      atStart = seen + batch.length
    }
    seen += batch.length
  }
  if (workload === 'consume') {
    const reader = topic.records('bench')
    for (;;) {
      const batch = await reader.poll()
      if (batch.length === 0) break
      count(batch)
    }
  } else {
    const consumer = await topic.consumerGroup('bench', { batchLength: batch, startFrom: { kind: 'first' } })
    while (seen < total) {
      const got = await consumer.poll({ timeoutMs: 30_000 })
      if (got.length === 0) throw new Error('no record within 30 s')
      count(got)
    }
    await consumer.shutdown()
  }
  const seconds = (performance.now() - start) / 1000
  if (seen !== total) throw new Error(`read ${seen} of ${total}`)
  report(seen - atStart, seconds)
}
await topic.delete()
await client.close()
