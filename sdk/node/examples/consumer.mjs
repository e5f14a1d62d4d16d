// A consumer group member that commits each record after handling it (the crash-safe,
// at-least-once mode): a crash re-delivers what was not committed, never skips.
//
// Embedded: node examples/consumer.mjs [DATA_DIR]; against a server: pass rill://HOST:PORT.
import { Rill, TimeoutError, utf8 } from '../index.mjs'

const target = process.argv[2] ?? './consumer-data'
const client = target.startsWith('rill') ? await Rill.connect(target) : await Rill.open(target)
const topic = client.stream('shop').topic('jobs')
await topic.ensure(2)
for (let i = 0; i < 10; i++) await topic.publish().bytes(utf8(`job-${i}`)).key(`k${i}`).send()

const ac = new AbortController()
process.once('SIGINT', () => ac.abort())
const consumer = await topic.consumerGroup('workers', {
  batchLength: 100, autoCommit: false, startFrom: { kind: 'first' }, pollIntervalMs: 5,
})
try {
  let handled = 0
  for (;;) {
    let message
    try {
      message = await consumer.nextWithin(1_000, { signal: ac.signal })
    } catch (e) {
      if (e instanceof TimeoutError) break // idle: done for this example
      throw e
    }
    console.log(`handling ${new TextDecoder().decode(message.value)} (partition ${message.partition} offset ${message.offset})`)
    handled++
    await consumer.commit(message) // after handling it
  }
  console.log(`handled ${handled} jobs as member ${consumer.memberId}`)
} finally {
  await consumer.shutdown() // leaves the group: its partitions move to the others
}
await client.close()
