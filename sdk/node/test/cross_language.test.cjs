'use strict'
// Node, Rust and Python agree: records published from Node (keys, every header type,
// values) are read by the `rill` CLI (the Rust SDK) with the same partitions, offsets,
// keys, headers and values, and records the CLI publishes are read by Node the same way;
// records published from Python are read by Node alike, and those from Node by Python
// (the Python SDK's venv, sdk/python/.venv, skipped without it). Keyed records land
// where `partitionForKey` says.
const test = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { Rill, HeaderValue, partitionForKey } = require('..')
const { RILL_BIN, startServer, unique } = require('./helpers.cjs')

const PARTITIONS = 3
const PYTHON = path.resolve(__dirname, '../../python/.venv/bin/python')
const hex = (bytes) => Buffer.from(bytes).toString('hex')
const unhex = (text) => Buffer.from(text, 'hex')
const INTS = new Set(['int8', 'int16', 'int32', 'int64', 'int128', 'uint8', 'uint16', 'uint32', 'uint64', 'uint128'])
// The CLI's names of header types (its JSON's `header_list`), and the integer types it
// writes as decimal strings there.
const CLI_TYPES = {
  str: 'str', bytes: 'bytes', bool: 'bool', int8: 'i8', int16: 'i16', int32: 'i32', int64: 'i64', int128: 'i128',
  uint8: 'u8', uint16: 'u16', uint32: 'u32', uint64: 'u64', uint128: 'u128', float32: 'f32', float64: 'f64',
}
const WIDE = new Set(['int64', 'int128', 'uint64', 'uint128'])

// Records as every language here writes them down: key and value in hex, headers as
// [name, type, value] with integers as decimal strings, bytes in hex, floats as numbers.
function records() {
  const out = []
  for (let i = 0; i < 12; i++) {
    out.push({
      key: hex(`account-${i % 5}`),
      value: hex(`value-${i}`),
      headers: [
        ['source', 'str', 'node ✓'],
        ['raw', 'bytes', hex([0, 255, i])],
        ['ok', 'bool', i % 2 === 0],
        ['i8', 'int8', String(-128 + i)],
        ['i16', 'int16', String(-32768 + i)],
        ['i32', 'int32', String(-2147483648 + i)],
        ['n', 'int64', String(-i)],
        ['i64', 'int64', String(-(2n ** 63n) + BigInt(i))],
        ['i128', 'int128', String(-(2n ** 127n) + BigInt(i))],
        ['u8', 'uint8', String(255 - i)],
        ['u16', 'uint16', String(i + 7)],
        ['u32', 'uint32', String(4294967295 - i)],
        ['u64', 'uint64', String(2n ** 64n - 1n - BigInt(i))],
        ['u128', 'uint128', String(2n ** 128n - 1n - BigInt(i))],
        ['f32', 'float32', 1.5 + i],
        ['f64', 'float64', 0.25 * i - 0.1],
      ],
    })
  }
  out.push({ key: 'ff00fe', value: hex('a key that is not UTF-8'), headers: [['empty', 'str', '']] })
  out.push({ key: null, partition: 1, value: 'fffe00', headers: [] })
  return out
}
// Repeated header names keep their order (the CLI's JSON, an object, cannot show them).
const REPEATS = { key: hex('repeats'), value: hex('twice'), headers: [['s', 'str', 'a'], ['x', 'bool', false], ['s', 'str', 'b']] }

function headerValue([, type, v]) {
  if (type === 'bytes') return HeaderValue.bytes(unhex(v))
  return HeaderValue[type](INTS.has(type) ? BigInt(v) : v)
}
function headerText(name, h) {
  if (h.type === 'bytes') return [name, h.type, hex(h.value)]
  return [name, h.type, INTS.has(h.type) ? String(h.value) : h.value]
}
/** A record read by Node, written down as above. */
function written(r) {
  return {
    partition: r.partition,
    offset: r.offset,
    timestampUs: r.timestampUs,
    key: r.key === null ? null : hex(r.key),
    headers: r.headers.map(([name, h]) => headerText(name, h)),
    value: hex(r.value),
  }
}

async function publishFromNode(topic, specs) {
  const positions = []
  for (const spec of specs) {
    let p = topic.publish().bytes(unhex(spec.value))
    if (spec.key !== null) p = p.key(unhex(spec.key))
    if (spec.partition != null) p = p.partition(spec.partition)
    for (const h of spec.headers) p = p.header(h[0], headerValue(h))
    positions.push(await p.send())
  }
  return positions
}

async function readAll(topic) {
  const reader = topic.records(unique('cursor'))
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

const byPosition = (rows) => [...rows].sort((a, b) => a.partition - b.partition || a.offset - b.offset)

/** Runs the `rill` CLI against `url`; its standard output. */
function cli(url, args, input = '') {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('RILL_')))
  return execFileSync(RILL_BIN, ['--server', url, ...args], { input, env, encoding: 'utf8', timeout: 60_000, stdio: 'pipe' })
}

/** JSON with integers beyond 2^53 read as bigints (the CLI prints u64/i64 headers as
 * plain numbers). */
function parseExact(text) {
  const marked = text.replace(/"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g, (token) =>
    token.startsWith('"') || /[.eE]/.test(token) || Number.isSafeInteger(Number(token)) ? token : `"\\u0000big:${token}"`)
  return JSON.parse(marked, (_, v) => (typeof v === 'string' && v.startsWith('\u0000big:') ? BigInt(v.slice(5)) : v))
}

/** A record as `rill consume --format json` prints it. */
function cliJson({ partition, offset, key, headers, value }) {
  const text = (h) => { try { return new TextDecoder('utf-8', { fatal: true }).decode(h) } catch { return null } }
  const out = { partition, offset }
  if (key === null) out.key = null
  else if (text(unhex(key)) !== null) out.key = text(unhex(key))
  else out.key_b64 = unhex(key).toString('base64')
  out.headers = {}
  for (const [name, type, v] of headers) {
    if (type === 'bytes') out.headers[name] = unhex(v).toString('base64')
    else if (type === 'int128' || type === 'uint128') out.headers[name] = v
    else if (INTS.has(type)) out.headers[name] = Number.isSafeInteger(Number(v)) ? Number(v) : BigInt(v)
    else out.headers[name] = v
  }
  // Every header, in order and typed: 64- and 128-bit integers as decimal strings.
  out.header_list = headers.map(([name, type, v]) => ({
    name,
    type: CLI_TYPES[type],
    value: type === 'bytes' ? unhex(v).toString('base64') : WIDE.has(type) ? v : INTS.has(type) ? Number(v) : v,
  }))
  if (text(unhex(value)) !== null) out.value = text(unhex(value))
  else out.value_b64 = unhex(value).toString('base64')
  return out
}

/** Runs an inline Python script with the SDK's venv; its standard output as JSON. */
function python(script, args, input = '') {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('RILL_')))
  return JSON.parse(execFileSync(PYTHON, ['-c', script, ...args], { input, env, encoding: 'utf8', timeout: 60_000, stdio: 'pipe' }))
}

const PY_PUBLISH = `
import asyncio, json, sys
import rill

def header(name, type, v):
    if type == "bytes":
        return (name, rill.HeaderValue(type, bytes.fromhex(v)))
    if type in ("float32", "float64"):
        return (name, rill.HeaderValue(type, float(v)))
    if type in ("str", "bool"):
        return (name, rill.HeaderValue(type, v))
    return (name, rill.HeaderValue(type, int(v)))

async def main(url, stream, name, partitions, specs):
    client = await rill.connect(url)
    topic = client.stream(stream).topic(name)
    out = []
    for spec in specs:
        p = topic.publish(bytes.fromhex(spec["value"]))
        if spec["key"] is not None:
            p = p.key(bytes.fromhex(spec["key"]))
        if spec.get("partition") is not None:
            p = p.partition(spec["partition"])
        for h in spec["headers"]:
            p = p.header(*header(*h))
        at = await p.send()
        routed = None if spec["key"] is None else rill.partition_for_key(bytes.fromhex(spec["key"]), partitions)
        out.append({"partition": at.partition, "offset": at.offset, "routed": routed})
    await client.close()
    print(json.dumps(out))

url, stream, name, partitions = sys.argv[1:5]
asyncio.run(main(url, stream, name, int(partitions), json.load(sys.stdin)))
`

const PY_READ = `
import asyncio, json, sys
import rill

def text(v):
    if v.type == "bytes":
        return v.value.hex()
    if v.type in ("str", "bool", "float32", "float64"):
        return v.value
    return str(v.value)

async def main(url, stream, name):
    client = await rill.connect(url)
    reader = client.stream(stream).topic(name).records("python-reader")
    out = []
    while (r := await reader.next()) is not None:
        out.append({
            "partition": r.partition, "offset": r.offset, "timestampUs": r.timestamp_us,
            "key": None if r.key is None else r.key.hex(),
            "headers": [[n, v.type, text(v)] for n, v in r.headers],
            "value": r.value.hex(),
        })
    await client.close()
    print(json.dumps(out))

asyncio.run(main(*sys.argv[1:4]))
`

test('cross-language agreement', { timeout: 180_000 }, async (t) => {
  const server = await startServer()
  const client = await Rill.connect(server.url)
  t.after(async () => {
    await client.close()
    await server.stop()
  })

  await t.test('records published from Node read the same from Rust', async () => {
    const stream = unique('s')
    const topic = client.stream(stream).topic('from-node')
    await topic.ensure(PARTITIONS)
    const specs = records()
    const positions = await publishFromNode(topic, specs)
    const sent = specs.map((spec, i) => {
      if (spec.key !== null) assert.equal(positions[i].partition, partitionForKey(unhex(spec.key), PARTITIONS), spec.key)
      else assert.equal(positions[i].partition, spec.partition)
      return cliJson({ ...spec, ...positions[i] })
    })
    assert.ok(new Set(positions.map((p) => p.partition)).size > 1, 'the keys spread over partitions')

    const lines = cli(server.url, ['consume', `${stream}/from-node`, '--format', 'json']).trim().split('\n')
    const read = lines.map(parseExact)
    for (const r of read) {
      assert.equal(typeof r.timestamp_us, 'number')
      delete r.timestamp_us
    }
    assert.deepEqual(byPosition(read), byPosition(sent))
  })

  await t.test('records published from Rust read the same from Node', async () => {
    const stream = unique('s')
    const target = `${stream}/from-rust`
    cli(server.url, ['topic', 'create', target, '--partitions', String(PARTITIONS)])
    const lines = Array.from({ length: 10 }, (_, i) => `customer-${i % 4}:order ${i}\n`).join('')
    cli(server.url, ['produce', target, '--key-sep', ':', '--header', 'origin=rust'], lines)

    const got = await readAll(client.stream(stream).topic('from-rust'))
    assert.equal(got.length, 10)
    for (const r of got) {
      const key = Buffer.from(r.key).toString()
      assert.equal(r.partition, partitionForKey(r.key, PARTITIONS), key)
      assert.deepEqual(r.headers, [['origin', HeaderValue.str('rust')]])
      const i = Number(/^order (\d+)$/.exec(Buffer.from(r.value).toString())[1])
      assert.equal(key, `customer-${i % 4}`)
    }
    // Per key, the CLI's line order is the append order.
    for (let c = 0; c < 4; c++) {
      const mine = byPosition(got).filter((r) => Buffer.from(r.key).toString() === `customer-${c}`)
        .map((r) => Number(Buffer.from(r.value).toString().split(' ')[1]))
      assert.deepEqual(mine, [...Array(10).keys()].filter((i) => i % 4 === c))
    }
    // And the CLI reads them exactly as Node did, timestamps too.
    const cliRead = cli(server.url, ['consume', target, '--format', 'json']).trim().split('\n').map(parseExact)
    const nodeRead = got.map((r) => ({ ...cliJson(written(r)), timestamp_us: r.timestampUs }))
    assert.deepEqual(byPosition(cliRead), byPosition(nodeRead))
  })

  await t.test('records published from Python read the same from Node', async (t) => {
    if (!fs.existsSync(PYTHON)) return t.skip(`no Python SDK venv at ${PYTHON} (build it as scripts/test does)`)
    const stream = unique('s')
    const topic = client.stream(stream).topic('from-python')
    await topic.ensure(PARTITIONS)
    const specs = [...records(), REPEATS]
    const positions = python(PY_PUBLISH, [server.url, stream, 'from-python', String(PARTITIONS)], JSON.stringify(specs))
    assert.equal(positions.length, specs.length)
    const expected = specs.map((spec, i) => {
      const { partition, offset, routed } = positions[i]
      if (spec.key !== null) {
        assert.equal(routed, partitionForKey(unhex(spec.key), PARTITIONS), `Python routes ${spec.key} as Node does`)
        assert.equal(partition, routed)
      } else {
        assert.equal(partition, spec.partition)
      }
      return { partition, offset, key: spec.key, headers: spec.headers, value: spec.value }
    })
    const read = (await readAll(topic)).map(written)
    for (const r of read) {
      assert.ok(r.timestampUs > 1_600_000_000_000_000)
      delete r.timestampUs
    }
    assert.deepEqual(byPosition(read), byPosition(expected))
  })

  await t.test('records published from Node read the same from Python', async (t) => {
    if (!fs.existsSync(PYTHON)) return t.skip(`no Python SDK venv at ${PYTHON} (build it as scripts/test does)`)
    const stream = unique('s')
    const topic = client.stream(stream).topic('from-node')
    await topic.ensure(PARTITIONS)
    const specs = [...records(), REPEATS]
    const positions = await publishFromNode(topic, specs)
    const expected = specs.map((spec, i) => ({
      partition: positions[i].partition, offset: positions[i].offset, key: spec.key, headers: spec.headers, value: spec.value,
    }))
    const read = python(PY_READ, [server.url, stream, 'from-node'])
    const nodeRead = (await readAll(topic)).map(written)
    assert.deepEqual(byPosition(read), byPosition(nodeRead), 'Python reads what Node reads, timestamps too')
    for (const r of read) delete r.timestampUs
    assert.deepEqual(byPosition(read), byPosition(expected))
  })
})
