'use strict'
// What a Node.js user would pick instead of Rill, producing the same shape as
// bench.mjs: ioredis with pipelined XADD (BATCH per round trip) into a Redis stream, or
// nats.js publishing to a JetStream stream (file storage), BATCH publishes in flight
// then waiting for their acks. One JSON line, the fields of bench.mjs.
//
// Usage: node peers.cjs redis|nats HOST:PORT [--messages N] [--size BYTES] [--batch N]
// (needs `ioredis` and `nats` on NODE_PATH; bench/sdks.sh installs them)
const { randomBytes } = require('node:crypto')

const [peer, addr, ...rest] = process.argv.slice(2)
const opt = (name, dflt) => {
  const i = rest.indexOf(`--${name}`)
  return i < 0 ? dflt : Number(rest[i + 1])
}
const n = opt('messages', 200_000)
const size = opt('size', 1024)
const batch = opt('batch', 1000)
const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))]

async function redisProduce() {
  const Redis = require('ioredis')
  const r = new Redis({ host, port })
  const key = `bench-${process.pid}-${Date.now()}`
  const value = randomBytes(size)
  const start = performance.now()
  for (let sent = 0; sent < n; sent += batch) {
    const p = r.pipeline()
    for (let i = 0; i < Math.min(batch, n - sent); i++) p.xadd(key, '*', 'v', value)
    await p.exec()
  }
  const seconds = (performance.now() - start) / 1000
  await r.del(key)
  r.disconnect()
  return seconds
}

async function natsProduce() {
  const { connect } = require('nats')
  const nc = await connect({ servers: `${host}:${port}` })
  const name = `bench-${process.pid}-${Date.now()}`
  const jsm = await nc.jetstreamManager()
  await jsm.streams.add({ name, subjects: [name] })
  const js = nc.jetstream()
  const value = randomBytes(size)
  const start = performance.now()
  for (let sent = 0; sent < n; sent += batch) {
    const acks = []
    for (let i = 0; i < Math.min(batch, n - sent); i++) acks.push(js.publish(name, value))
    await Promise.all(acks)
  }
  const seconds = (performance.now() - start) / 1000
  await jsm.streams.delete(name)
  await nc.close()
  return seconds
}

;(peer === 'redis' ? redisProduce() : natsProduce()).then((seconds) => {
  console.log(JSON.stringify({
    sdk: `node-${peer}`, workload: 'produce', records: n, size, seconds,
    records_per_s: n / seconds, mb_per_s: n * size / seconds / 1e6,
  }))
}, (e) => { console.error(e); process.exit(1) })
