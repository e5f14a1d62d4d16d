'use strict'
// The core over both transports: publish/read round trips, cursors, start variants,
// commit policies, error mapping, routing vectors, AbortSignal.
const test = require('node:test')
const assert = require('node:assert/strict')
const rill = require('..')
const { HeaderValue, utf8, partitionForKey } = rill
const { TRANSPORTS, unique } = require('./helpers.cjs')

// key, partitions, partition: every row of the table in docs/PROTOCOL.md §6.
const VECTORS = [
  ['', 1, 0],
  ['order-17', 1, 0],
  ['order-17', 12, 6],
  ['k0', 4, 3],
  ['a', 3, 1],
]

const ALL_HEADERS = {
  s: HeaderValue.str('text ✓'),
  b: HeaderValue.bytes(new Uint8Array([0, 1, 255])),
  t: HeaderValue.bool(true),
  i8: HeaderValue.int8(-128),
  i16: HeaderValue.int16(-32768),
  i32: HeaderValue.int32(-2147483648),
  i64: HeaderValue.int64(-(2n ** 63n)),
  i128: HeaderValue.int128(-(2n ** 127n)),
  u8: HeaderValue.uint8(255),
  u16: HeaderValue.uint16(7),
  u32: HeaderValue.uint32(4294967295),
  u64: HeaderValue.uint64(2n ** 64n - 1n),
  u128: HeaderValue.uint128(2n ** 128n - 1n),
  f32: HeaderValue.float32(1.5),
  f64: HeaderValue.float64(-0.1),
}

test('routing vectors of docs/PROTOCOL.md §6', () => {
  for (const [key, partitions, partition] of VECTORS) {
    assert.equal(partitionForKey(key, partitions), partition, `${key}/${partitions}`)
    assert.equal(partitionForKey(utf8(key), partitions), partition)
  }
  assert.throws(() => partitionForKey('k', 0), rill.InvalidArgumentError)
  assert.throws(() => partitionForKey('k', -1), rill.InvalidArgumentError)
  assert.throws(() => partitionForKey(7, 3), rill.InvalidArgumentError)
})

test('header values are checked before anything is sent', () => {
  assert.throws(() => HeaderValue.uint8(256), rill.InvalidArgumentError)
  assert.throws(() => HeaderValue.int64(1.5), rill.InvalidArgumentError)
  assert.throws(() => HeaderValue.uint64(-1n), rill.InvalidArgumentError)
})

async function drain(reader) {
  const out = []
  for (;;) {
    const batch = await reader.poll()
    if (batch.length === 0) return out
    for (const r of batch) {
      assert.equal(r.kind, 'record', r.error && r.error.message)
      out.push(r.record)
    }
  }
}

for (const [transport, setup] of TRANSPORTS) {
  test(`${transport}`, async (t) => {
    const env = await setup()
    const client = env.client
    t.after(() => env.teardown())

    await t.test('publish and read back keys, every header type and values', async () => {
      const topic = client.stream(unique('s')).topic('orders')
      const config = await topic.ensure(2)
      assert.equal(config.partitions, 2)
      const at = await topic.publish().bytes(utf8('placed')).key('order-17').header('n', HeaderValue.uint16(7)).send()
      assert.equal(at.partition, partitionForKey('order-17', 2))
      assert.equal(at.offset, 0)
      const jsonAt = await topic.publish().json({ id: 1, items: ['a'] }).partition(1).send()
      assert.equal(jsonAt.partition, 1)
      let headers = []
      for (const [k, v] of Object.entries(ALL_HEADERS)) headers.push([k, v])
      headers.push(['s', 'plain str twice'])
      const full = await topic.publish().bytes(new Uint8Array([9, 8, 7])).key(utf8('k0')).header('x', true).send()
      const viaProducer = topic.producer()
      const sent = await viaProducer.send(utf8('all'), { key: 'account-42', headers })
      assert.equal(sent.partition, partitionForKey('account-42', 2))
      await viaProducer.shutdown()

      const records = await drain(topic.records('audit'))
      assert.equal(records.length, 4)
      const byValue = new Map(records.map((r) => [Buffer.from(r.value).toString('latin1'), r]))
      const placed = byValue.get('placed')
      assert.deepEqual(Buffer.from(placed.key).toString(), 'order-17')
      assert.deepEqual(placed.header('n'), HeaderValue.uint16(7))
      assert.ok(placed.timestampUs > 1_600_000_000_000_000)
      assert.deepEqual(JSON.parse(Buffer.from(byValue.get('{"id":1,"items":["a"]}').value)), { id: 1, items: ['a'] })
      assert.equal(byValue.get('\x09\x08\x07').header('x').value, true)
      const all = byValue.get('all')
      assert.equal(all.headers.length, headers.length)
      for (const [name, value] of Object.entries(ALL_HEADERS)) {
        assert.deepEqual(all.header(name), value, name)
      }
      assert.deepEqual(all.headers.at(-1), ['s', HeaderValue.str('plain str twice')], 'order and repeats kept')
      assert.equal(full.partition, partitionForKey('k0', 2))
    })

    await t.test('json topic with a codec, cursor save and restore', async () => {
      const topic = client.stream(unique('s')).topic('log')
      await topic.ensure(3)
      const CODEC = {
        encode: (v) => utf8(`${v.n}`),
        decode: (b) => ({ n: Number(Buffer.from(b).toString()) }),
      }
      const typed = topic.json(CODEC)
      for (let n = 0; n < 30; n++) await typed.publish().value({ n }).key(`k${n}`).send()
      const reader = typed.records('log-example', { maxResults: 10 })
      const first = await reader.poll()
      assert.ok(first.length > 0 && first.length <= 10)
      const saved = reader.offsets()
      const rest = await drain(topic.json(CODEC).records('log-example', { offsets: saved }))
      const seen = [...first.map((r) => r.record.value.n), ...rest.map((r) => r.value.n)].sort((a, b) => a - b)
      assert.deepEqual(seen, [...Array(30).keys()])
      assert.deepEqual(await reader.poll().then(async (b) => b.length + (await drain(reader)).length), 30 - first.length)
      assert.deepEqual(await reader.poll(), [], 'caught up')
      // async iteration from the start
      let count = 0
      for await (const r of topic.json(CODEC).records('again')) { assert.equal(typeof r.value.n, 'number'); count++ }
      assert.equal(count, 30)
      // a value the codec cannot read is an error result carrying its position; reading goes on
      await topic.publish().bytes('not a number').partition(0).send()
      const results = await topic.json().records('json-reader', { offsets: { 0: 0, 1: 1000, 2: 1000 } }).poll()
      assert.ok(results.length > 0)
      assert.ok(results.every((r) => r.kind === 'record' || r.error instanceof rill.DecodeError))
      assert.ok(results.some((r) => r.kind === 'error' && r.error.partition === 0))
    })

    await t.test('start variants of a named consumer', async () => {
      const topic = client.stream(unique('s')).topic('t')
      await topic.ensure(1)
      for (let i = 0; i < 5; i++) await topic.publish().bytes(`m${i}`).send()
      const firstRecord = async (startFrom) => {
        const c = await topic.consumer(unique('c'), 0, { startFrom, autoCommit: false, pollIntervalMs: 5 })
        try {
          return await c.nextWithin(5_000)
        } finally {
          await c.shutdown()
        }
      }
      assert.equal((await firstRecord({ kind: 'first' })).offset, 0)
      assert.equal((await firstRecord({ kind: 'offset', offset: 3 })).offset, 3)
      assert.equal((await firstRecord({ kind: 'next' })).offset, 0, 'next without a stored offset is the beginning')
      assert.equal((await firstRecord({ kind: 'timestamp', timestampMicros: 0 })).offset, 0)
      {
        const c = await topic.consumer(unique('c'), 0, { startFrom: { kind: 'last' }, autoCommit: false, pollIntervalMs: 5 })
        const r = await c.nextWithin(5_000)
        assert.ok(r.offset === 4 || r.offset === 5, `last starts at the tail, got ${r.offset}`)
        await c.shutdown()
      }
      {
        // end: only what is appended after the start
        const c = await topic.consumer(unique('c'), 0, { startFrom: { kind: 'end' }, autoCommit: false, pollIntervalMs: 5 })
        await assert.rejects(c.nextWithin(300), rill.TimeoutError)
        const at = await topic.publish().bytes('later').partition(0).send()
        assert.equal((await c.nextWithin(5_000)).offset, at.offset)
        await c.shutdown()
      }
      // a stored offset wins over startFrom (unless allowReplay)
      const name = unique('c')
      await topic.storeOffset(name, 0, 2)
      {
        const c = await topic.consumer(name, 0, { startFrom: { kind: 'first' }, autoCommit: false })
        assert.equal((await c.nextWithin(5_000)).offset, 3)
        await c.shutdown()
      }
      {
        const c = await topic.consumer(name, 0, { startFrom: { kind: 'first' }, allowReplay: true, autoCommit: false })
        assert.equal((await c.nextWithin(5_000)).offset, 0)
        await c.shutdown()
      }
      await assert.rejects(topic.consumer('c', 0, { startFrom: { kind: 'offset' } }), rill.InvalidArgumentError)
      await assert.rejects(topic.consumer('c', 0, { startFrom: { kind: 'sideways' } }), rill.InvalidArgumentError)
    })

    await t.test('commit policies store where they say', async () => {
      const topic = client.stream(unique('s')).topic('t')
      await topic.ensure(1)
      for (let i = 0; i < 6; i++) await topic.publish().bytes(`m${i}`).send()
      const opts = { startFrom: { kind: 'first' }, pollIntervalMs: 5, batchLength: 100 }

      // disabled: nothing until commit(record), then exactly that record
      let name = unique('disabled')
      {
        const c = await topic.consumerGroup(name, { ...opts, autoCommit: false })
        const r0 = await c.nextWithin(5_000)
        await c.nextWithin(5_000)
        assert.equal(c.lastStoredOffset(0), null)
        assert.equal(await topic.describeGroup(name).then((g) => g.partitions[0].storedOffset), null)
        await c.commit(r0)
        assert.equal(c.lastStoredOffset(0), 0)
        await c.shutdown()
      }
      assert.equal((await topic.describeGroup(name)).partitions[0].storedOffset, 1, 'the group stores the next offset; shutdown stores nothing more')

      // each: a record counts as handled once the next is asked for
      name = unique('each')
      {
        const c = await topic.consumerGroup(name, { ...opts, commitPolicy: 'each' })
        await c.nextWithin(5_000)
        await c.nextWithin(5_000)
        await c.nextWithin(5_000)
        assert.equal(c.lastStoredOffset(0), 1)
        await c.shutdown()
      }
      assert.equal((await topic.describeGroup(name)).partitions[0].storedOffset, 3, 'shutdown stores the last handed out (as the next offset, 3)')

      // every(2)
      name = unique('every')
      {
        const c = await topic.consumerGroup(name, { ...opts, commitPolicy: { kind: 'every', every: 2 } })
        for (let i = 0; i < 4; i++) await c.nextWithin(5_000)
        const stored = c.lastStoredOffset(0)
        assert.ok(stored === 1 || stored === 2, `every 2 stored ${stored}`)
        await c.shutdown()
      }

      // interval: stores on its timer
      name = unique('interval')
      {
        const c = await topic.consumerGroup(name, { ...opts, commitPolicy: { kind: 'interval', intervalMs: 20 } })
        await c.nextWithin(5_000)
        await c.nextWithin(5_000)
        const deadline = Date.now() + 5_000
        while (c.lastStoredOffset(0) == null && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 20))
          await c.nextWithin(50).catch((e) => assert.ok(e instanceof rill.TimeoutError || e instanceof rill.RillError))
        }
        assert.ok(c.lastStoredOffset(0) >= 0)
        await c.shutdown()
      }

      for (const bad of [{ kind: 'every', every: 0 }, { kind: 'interval', intervalMs: 0 }, { kind: 'interval' },
        { kind: 'each', every: 3 }, { kind: 'sometimes' }]) {
        await assert.rejects(topic.consumerGroup('g', { commitPolicy: bad }), rill.InvalidArgumentError, JSON.stringify(bad))
      }
      await assert.rejects(topic.consumerGroup('g', { autoCommit: 'no' }), rill.InvalidArgumentError)
      await assert.rejects(topic.consumerGroup('g', { autoComit: false }), /unknown consumer group option/)
    })

    await t.test('errors are typed', async () => {
      const stream = client.stream(unique('s'))
      await assert.rejects(client.stream('bad name!').topic('t').ensure(1), (e) => {
        assert.ok(e instanceof rill.RillError)
        assert.ok(e instanceof rill.InvalidNameError || e instanceof rill.InvalidArgumentError, e.constructor.name)
        return true
      })
      await assert.rejects(stream.topic('missing').publish().bytes('x').send(), (e) => {
        assert.ok(e instanceof rill.ServerError, e.constructor.name)
        assert.ok(['TOPIC_NOT_FOUND', 'STREAM_NOT_FOUND'].includes(e.code), e.code)
        assert.equal(e.kind, 'Server')
        return true
      })
      const topic = stream.topic('t')
      await topic.ensure(2)
      await assert.rejects(topic.ensure(3), rill.RillError, 'another partition count')
      await assert.rejects(topic.publish().bytes('x').key('k').partition(1).send(), rill.InvalidArgumentError)
      await assert.rejects(topic.publish().bytes('x').key('').send(), rill.InvalidArgumentError)
      await assert.rejects(topic.publish().send(), rill.InvalidArgumentError)
      await assert.rejects(topic.producer().send(utf8('x'), { key: 'k', partition: 1 }), rill.InvalidArgumentError)
      await assert.rejects(topic.producer({ key: 'k', partition: 0 }).send(utf8('x')), rill.InvalidArgumentError)
      assert.throws(() => topic.producer({ bogus: 1 }), rill.InvalidArgumentError)
      assert.throws(() => topic.producer({ batchLength: -1 }), rill.InvalidArgumentError)
      await assert.rejects(topic.publish().bytes('x').partition(7).send(), rill.RillError)
      assert.throws(() => topic.publish().bytes(42), rill.InvalidArgumentError)
      assert.throws(() => topic.publish().header('n', 5), rill.InvalidArgumentError)
      await assert.rejects(rill.Rill.connect('http://nope'), rill.InvalidUrlError)
      await assert.rejects(rill.Rill.connect(42), rill.InvalidArgumentError)
      await assert.rejects(topic.consumer('c', 0, { startFrom: { kind: 'offset', offset: -1 } }), rill.InvalidArgumentError)
      assert.throws(() => topic.json().publish().value(undefined), rill.EncodeError)
    })

    await t.test('producer sendBatch and admin', async () => {
      const stream = client.stream(unique('s'))
      const topic = stream.topic('orders')
      await topic.create({ partitions: 4, retentionMs: 3_600_000, ifMissing: true })
      const producer = topic.producer({ retries: 3, retryIntervalMs: 1_000, batchLength: 1000, lingerMs: 5 })
      const positions = await producer.sendBatch(VECTORS.filter(([k]) => k).map(([k]) => ({ value: utf8(k), key: k })))
      assert.deepEqual(positions.map((p) => p.partition), VECTORS.filter(([k]) => k).map(([k]) => partitionForKey(k, 4)))
      const d = await topic.describe()
      assert.equal(d.config.partitions, 4)
      assert.equal(d.config.retentionMs, 3_600_000)
      assert.equal(d.partitions.reduce((n, p) => n + p.nextOffset, 0), positions.length)
      const topics = await client.listTopics(stream.name)
      assert.deepEqual(topics.map((x) => x.name), ['orders'])
      assert.ok((await client.listStreams()).some((s) => s.name === stream.name))
      await producer.shutdown()
      await topic.delete()
      await assert.rejects(topic.describe(), rill.ServerError)
    })

    await t.test('consumer poll hands out every record once and stores a poll only after it', async () => {
      const raw = client.stream(unique('s')).topic('t')
      await raw.ensure(1)
      const values = Array.from({ length: 12 }, (_, i) => (i === 5 ? 'not json' : JSON.stringify({ n: i })))
      for (const v of values) await raw.publish().bytes(v).send()
      const typed = raw.json()
      const policies = ['polling', 'all', 'each', { kind: 'every', every: 2 }, { kind: 'interval', intervalMs: 60_000 }]
      for (const [kind, make] of [
        ['named', (p, name) => typed.consumer(name, 0, { startFrom: { kind: 'first' }, batchLength: 4, commitPolicy: p, pollIntervalMs: 5 })],
        ['group', (p, name) => typed.consumerGroup(name, { startFrom: { kind: 'first' }, batchLength: 4, commitPolicy: p, pollIntervalMs: 5 })],
      ]) {
        for (const policy of policies) {
          const label = `${kind} ${JSON.stringify(policy)}`
          const c = await make(policy, unique('c'))
          const got = []
          while (got.length < 12) {
            const batch = await c.poll({ timeoutMs: 10_000 })
            assert.ok(batch.length > 0 && batch.length <= 4, `${label}: one fetch at most, got ${batch.length}`)
            const first = batch[0].kind === 'record' ? batch[0].record.offset : batch[0].error.offset
            const stored = c.lastStoredOffset(0)
            assert.ok(stored === null || stored < first, `${label}: stored ${stored} before poll from ${first} was done`)
            for (const r of batch) {
              if (r.kind === 'record') {
                assert.deepEqual(r.record.value, { n: r.record.offset })
                got.push(r.record.offset)
              } else {
                assert.ok(r.error instanceof rill.DecodeError, label)
                assert.equal(r.error.offset, 5)
                got.push(5)
              }
            }
          }
          assert.deepEqual(got, [...Array(12).keys()], `${label}: every record once, in order`)
          assert.deepEqual(await c.poll({ timeoutMs: 300 }), [], `${label}: caught up`)
          await c.shutdown()
          assert.deepEqual(await c.poll({ timeoutMs: 10 }), [], `${label}: after shutdown`)
        }
      }
      const c = await typed.consumer(unique('c'), 0, { startFrom: { kind: 'first' } })
      await assert.rejects(c.poll({ maxResults: 0 }), rill.InvalidArgumentError)
      await assert.rejects(c.poll({ maxRecords: 3 }), /unknown poll option/)
      const two = await c.poll({ maxResults: 2 })
      assert.deepEqual(two.map((r) => r.record.offset), [0, 1])
      assert.equal((await c.nextWithin(5_000)).offset, 2, 'poll and next mix in order')
      await c.shutdown()
    })

    await t.test('AbortSignal ends a waiting nextWithin and next', async () => {
      const topic = client.stream(unique('s')).topic('t')
      await topic.ensure(1)
      const consumer = await topic.consumerGroup('workers', { autoCommit: false, startFrom: { kind: 'first' }, pollIntervalMs: 5 })
      const ac = new AbortController()
      const started = Date.now()
      setTimeout(() => ac.abort(), 100)
      await assert.rejects(consumer.nextWithin(10_000, { signal: ac.signal }), rill.AbortError)
      assert.ok(Date.now() - started < 5_000)
      const ac2 = new AbortController()
      setTimeout(() => ac2.abort(), 50)
      await assert.rejects(consumer.next({ signal: ac2.signal }), rill.AbortError)
      await assert.rejects(consumer.next({ signal: AbortSignal.abort() }), rill.AbortError)
      // the consumer still works after an abort
      await topic.publish().bytes('after').send()
      const r = await consumer.nextWithin(5_000)
      assert.equal(Buffer.from(r.value).toString(), 'after')
      await assert.rejects(consumer.nextWithin(50), rill.TimeoutError)
      // shutdown ends iteration
      const stopping = new Promise((r) => setTimeout(r, 50)).then(() => consumer.shutdown())
      for await (const _ of consumer) assert.fail('no record expected')
      await stopping
      await assert.rejects(consumer.nextWithin(50), rill.ShutdownError)
    })
  })
}
