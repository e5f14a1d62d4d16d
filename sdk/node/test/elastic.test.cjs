'use strict'
// Elastic topics (docs/RANGES.md) over both transports: created with their ranges,
// split and merged while records are published and produced by key, read back by a
// cursor with each key's records in order; the automatic policy's options round-trip;
// named consumers and consumer groups read every range, parents first.
const test = require('node:test')
const assert = require('node:assert/strict')
const rill = require('..')
const { utf8 } = rill
const { TRANSPORTS, unique } = require('./helpers.cjs')

const KEYS = Array.from({ length: 10 }, (_, i) => `k${i}`)

/** Takes as many records as were sent from `reader`: each sent one once, each key's in
 * the order sent. */
async function readInKeyOrder(reader, sent) {
  const got = []
  while (got.length < sent.length) got.push(Buffer.from((await reader.nextWithin(5000)).value).toString())
  assert.deepEqual([...got].sort(), [...sent].sort())
  const last = new Map()
  for (const v of got) {
    const [key, n] = v.split('/')
    assert.ok((last.get(key) ?? -1) < Number(n), `${v} after ${last.get(key)}`)
    last.set(key, Number(n))
  }
}

for (const [transport, setup] of TRANSPORTS) {
  test(`${transport}`, async (t) => {
    const env = await setup()
    const client = env.client
    t.after(() => env.teardown())

    await t.test('splits and merges under publishes and a producer keep each key in order', async () => {
      const topic = client.stream(unique('s')).topic('e')
      const config = await topic.create({ partitions: 2, elastic: true, durability: 'never' })
      assert.equal(config.elastic, true)
      assert.equal(config.autoSplit, null)
      let d = await topic.describe()
      assert.deepEqual(d.ranges.map((r) => [r.id, r.lo, r.parents, r.sealedAt]), [[0, 0n, [], null], [1, 2n ** 63n, [], null]])
      assert.equal(d.ranges[1].hi, 2n ** 64n - 1n)
      const sent = []
      const producer = topic.producer({ batchLength: 8, lingerMs: 2 })
      const round = async (n, viaProducer) => {
        for (const key of KEYS) {
          const value = `${key}/${n}`
          if (viaProducer) await producer.send(utf8(value), { key })
          else await topic.publish().bytes(utf8(value)).key(key).send()
          sent.push(value)
        }
      }
      await round(0, false)
      const split = await topic.splitRange({ range: 0 })
      assert.deepEqual(split.opened, [2, 3])
      assert.equal(split.sealed[0][0], 0)
      assert.ok(split.sealed[0][1] > 0)
      assert.equal(split.rangeEpoch, 1)
      await round(1, true)
      const second = await topic.splitRange({ at: 3n << 62n })
      assert.equal(second.rangeEpoch, 2)
      await round(2, false)
      d = await topic.describe()
      const open = d.ranges.filter((r) => r.sealedAt === null).sort((a, b) => (a.lo < b.lo ? -1 : 1))
      const merged = await topic.mergeRanges(open[0].id, open[1].id)
      assert.equal(merged.sealed.length, 2)
      assert.equal(merged.opened.length, 1)
      await round(3, true)
      await producer.shutdown()
      d = await topic.describe()
      assert.equal(d.rangeEpoch, 3)
      for (const r of d.ranges) {
        if (r.sealedAt !== null) assert.equal(d.partitions[r.id].nextOffset, r.sealedAt)
        // A sealed range takes no writes: no rate (an open one's is null until sampled).
        if (r.sealedAt !== null) assert.equal(r.bytesPerS, null)
        else assert.ok(r.bytesPerS === null || r.bytesPerS >= 0)
      }
      const reader = topic.records('check')
      const read = []
      for (;;) {
        const batch = await reader.poll()
        if (batch.length === 0) break
        for (const r of batch) {
          assert.equal(r.kind, 'record', r.error && r.error.message)
          read.push(Buffer.from(r.record.value).toString())
        }
      }
      assert.deepEqual([...read].sort(), [...sent].sort())
      const last = new Map()
      for (const v of read) {
        const [key, n] = v.split('/')
        assert.ok((last.get(key) ?? -1) < Number(n), `${v} after ${last.get(key)}`)
        last.set(key, Number(n))
      }
      // A named consumer reads every range too, parents first.
      const consumer = await topic.consumer('c', 0)
      await readInKeyOrder(consumer, sent)
      await consumer.shutdown()
      // So does a consumer group: a child range is handed out once the group stored its
      // parents' seals.
      const group = await topic.consumerGroup('g', { sessionTimeoutMs: 5000 })
      await readInKeyOrder(group, sent)
      await group.shutdown()
      const described = await topic.describe()
      const g = await topic.describeGroup('g')
      for (const r of described.ranges) {
        if (r.sealedAt) assert.equal(g.partitions[r.id].storedOffset, r.sealedAt, `range ${r.id}`)
      }
    })

    await t.test('the automatic policy round-trips, bad options are refused', async () => {
      const stream = client.stream(unique('s'))
      const config = await stream.topic('auto').create({ elastic: true, autoSplit: { bytesPerS: 50000, windowMs: 2000 } })
      assert.deepEqual(config.autoSplit, { bytesPerS: 50000, windowMs: 2000, cooldownMs: 300000 })
      await assert.rejects(stream.topic('plain').create({ autoSplit: { bytesPerS: 1 } }), rill.InvalidConfigError)
      await assert.rejects(stream.topic('x').create({ elastic: true, autoSplit: { bytesPerS: 1, windowMs: 10 } }), rill.InvalidConfigError)
      await assert.rejects(stream.topic('x').create({ elastic: true, autoSplit: { bytes: 1 } }), rill.InvalidArgumentError)
      await stream.topic('plain2').create()
      await assert.rejects(stream.topic('plain2').splitRange(), rill.InvalidRequestError)
      await assert.rejects(stream.topic('plain2').splitRange({ at: -1 }), rill.InvalidArgumentError)
    })
  })
}
