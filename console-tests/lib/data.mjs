// The data the console is shown, loaded with the `rill` CLI as a user would: topics,
// records with keys, typed headers and JSON values (and text, binary, a large value,
// and a key that looks like markup), a consumer group with stored offsets and lag, a
// named consumer, a group with a live member, and an elastic topic whose first key
// range was split.

import { rill, rillJson, spawnRill } from './server.mjs'

/** The first record of shop/events (one partition, so every record is on partition 0). */
export const ORDER = {
  key: 'customer-1',
  value: { order: 1001, customer: 'customer-1', total: 12.5, items: [{ sku: 'A-1', qty: 2 }], big: '@BIG@', note: '<img src=x onerror="window.__xss=1">' },
  headers: [
    { name: 'trace', type: 'str', value: 'abc-123' },
    { name: 'attempt', type: 'u64', value: '3' },
    { name: 'retry', type: 'bool', value: true },
    { name: 'sig', type: 'bytes', value: '3q2+7w==' },
  ],
}
/** An integer JSON cannot hold in a double: the console must show it as written. */
export const BIG = '12345678901234567890'
export const MARKUP_KEY = '<script>window.__xss=2</script>'
export const TEXT_VALUE = 'hello from rill'
/** Bytes that are not UTF-8 (the last one, 0xff, never is): the API sends them as base64. */
export const BINARY = Buffer.from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 0xff])
/** Records of shop/events before the filler ones. */
export const HEAD_RECORDS = 5
/** Filler records produced to shop/events after a pause, so their times differ. */
export const FILLER_RECORDS = 20
/** Keyed records spread over the partitions of shop/orders by their keys. */
export const KEYED_RECORDS = 45
/** Records the group `billing` consumed (and stored offsets for). */
export const BILLING_CONSUMED = 30

function jsonLine(record) {
  // The BIG placeholder becomes a bare number in the value's text.
  const value = JSON.stringify(record.value).replace('"@BIG@"', BIG)
  return JSON.stringify({ key: record.key, value, header_list: record.headers })
}

/** A large JSON value (about 12 KB), more than the console shows before "Show all". */
export function largeValue() {
  const rows = Array.from({ length: 200 }, (_, i) => ({ row: i, label: `row number ${i}` }))
  return JSON.stringify({ kind: 'large', rows })
}

export async function load(server) {
  await rill(server, ['topic', 'create', 'shop/orders', '--partitions', '3'])
  await rill(server, ['topic', 'create', 'shop/events', '--partitions', '1'])
  await rill(server, ['topic', 'create', 'shop/payments', '--partitions', '1'])
  await rill(server, ['topic', 'create', 'logs/app', '--partitions', '2', '--durability', 'never'])

  // shop/events: the order with typed headers, a key that looks like markup, a text
  // value, a binary value and a large JSON value, in this order, then the filler.
  const head = [
    jsonLine(ORDER),
    JSON.stringify({ key: MARKUP_KEY, value: '{"markup":"<b>not bold</b>"}', header_list: [{ name: '<i>h</i>', type: 'str', value: '<u>x</u>' }] }),
    JSON.stringify({ key: null, value: TEXT_VALUE }),
    JSON.stringify({ key: 'bin', value_b64: BINARY.toString('base64') }),
    JSON.stringify({ key: 'large', value: largeValue() }),
  ]
  await rill(server, ['produce', 'shop/events', '--format', 'json'], { input: `${head.join('\n')}\n` })
  await new Promise((r) => setTimeout(r, 50))
  const filler = Array.from({ length: FILLER_RECORDS }, (_, i) => JSON.stringify({ key: `filler-${i}`, value: JSON.stringify({ n: i }) }))
  await rill(server, ['produce', 'shop/events', '--format', 'json'], { input: `${filler.join('\n')}\n` })

  // shop/orders: keyed records over every partition, with a string header from --header.
  const keyed = Array.from({ length: KEYED_RECORDS }, (_, i) => `customer-${i % 7}|{"order":${2000 + i},"total":${(i * 1.25).toFixed(2)}}`)
  await rill(server, ['produce', 'shop/orders', '--key-sep', '|', '--header', 'source=web'], { input: `${keyed.join('\n')}\n` })
  await rill(server, ['produce', 'shop/payments'], { input: 'paid 1\npaid 2\npaid 3\n' })
  await rill(server, ['produce', 'logs/app'], { input: 'boot\nready\n' })

  // shop/carts: an elastic topic of two key ranges, the first split under keyed records.
  await rill(server, ['topic', 'create', 'shop/carts', '--elastic', '--ranges', '2'])
  const carts = (n) => Array.from({ length: 24 }, (_, i) => `cart-${i}|item ${n}`).join('\n') + '\n'
  await rill(server, ['produce', 'shop/carts', '--key-sep', '|'], { input: carts(1) })
  await rill(server, ['topic', 'split', 'shop/carts', '--range', '0'])
  await rill(server, ['produce', 'shop/carts', '--key-sep', '|'], { input: carts(2) })

  // A group with stored offsets and lag, a named consumer, and a group with a live member.
  await rill(server, ['consume', 'shop/orders', '--group', 'billing', '--count', String(BILLING_CONSUMED)])
  await rill(server, ['consume', 'shop/orders', '--name', 'audit', '--count', '10'])
  const member = spawnRill(server, ['consume', 'shop/payments', '--group', 'live', '--member', 'm-live', '--follow'])
  // The pages are checked against the CLI's numbers, so the member must be settled
  // first: joined, and caught up (it stores its offsets when the stream goes quiet).
  const deadline = Date.now() + 15_000
  for (;;) {
    const g = await rillJson(server, ['group', 'describe', 'shop/payments', 'live']).catch(() => null)
    if (g && g.members.length === 1 && g.lag === 0) break
    if (Date.now() > deadline) throw new Error(`the member of group live did not catch up: ${JSON.stringify(g)}`)
    await new Promise((r) => setTimeout(r, 100))
  }
  return { member }
}

/** What the CLI says of a topic (an independent source for the tests' expectations). */
export function describeTopic(server, topic) {
  return rillJson(server, ['topic', 'describe', topic])
}

export function describeGroup(server, topic, group) {
  return rillJson(server, ['group', 'describe', topic, group])
}
