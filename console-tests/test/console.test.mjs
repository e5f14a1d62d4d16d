// The web console of a read-only `rill serve` (no --http-admin-writes), page by page,
// in headless Chromium: what each page renders against what the CLI says of the same
// data, a screenshot of each, no sideways scrolling at 1366×768, no write actions, the
// banner while the server is down, and no error in the browser's console.

import assert from 'node:assert/strict'
import fs from 'node:fs'
import { after, before, describe, test } from 'node:test'
import { OUTPUT, horizontalOverflow, launch, screenshot } from '../lib/browser.mjs'
import {
  BIG, BILLING_CONSUMED, FILLER_RECORDS, HEAD_RECORDS, MARKUP_KEY, TEXT_VALUE,
  describeGroup, describeTopic, load,
} from '../lib/data.mjs'
import { restart, rill, rillJson, startServer, stopProcess } from '../lib/server.mjs'

const count = (n) => new Intl.NumberFormat('en-US').format(n)

async function listGroups(server, topic) {
  return (await rillJson(server, ['group', 'list', topic])).groups
}

describe('the console of a read-only server', () => {
  let server
  let browser
  let page
  let member

  before(async () => {
    server = await startServer()
    ;({ member } = await load(server))
    browser = await launch()
    page = browser.page
    console.log(`screenshots go to ${OUTPUT}`)
  })

  after(async () => {
    if (member) await stopProcess(member)
    if (browser) await browser.close()
    if (server) {
      await server.stop()
      fs.rmSync(server.data, { recursive: true, force: true })
    }
  })

  /** Opens a page of the console by its hash and waits for its heading. */
  async function visit(hash) {
    await page.goto(`${server.http}/${hash}`)
    await page.locator('main h1').waitFor()
  }

  /** Saves the page's screenshot and checks it fits the window's width. */
  async function check(name) {
    const file = await screenshot(page, name)
    assert.equal(await horizontalOverflow(page), 0, `${name} scrolls sideways at 1366×768 (${file})`)
  }

  const cells = (row) => row.locator('td').allInnerTexts()

  test('overview: every topic with its totals, the server, the throughput chart', async () => {
    await visit('#/')
    const rows = page.locator('tr[data-topic]')
    await rows.first().waitFor()
    assert.deepEqual(
      await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.topic)),
      ['logs/app', 'shop/carts', 'shop/events', 'shop/orders', 'shop/payments'])
    for (const name of ['shop/orders', 'shop/events', 'logs/app']) {
      const d = await describeTopic(server, name)
      const records = d.partitions.reduce((sum, p) => sum + p.next_offset - p.first_offset, 0)
      const segments = d.partitions.reduce((sum, p) => sum + p.segments, 0)
      const [topic, partitions, shown, , shownSegments, , , health] = await cells(page.locator(`tr[data-topic="${name}"]`))
      assert.equal(topic, name)
      assert.equal(partitions, String(d.options.partitions), name)
      assert.equal(shown, count(records), name)
      assert.equal(shownSegments, String(segments), name)
      assert.equal(health, 'ok')
    }
    // The topic links lead to the topic's page.
    assert.equal(await page.locator('tr[data-topic="shop/orders"] a').getAttribute('href'), '#/topics/shop/orders')

    const info = await (await fetch(`${server.http}/api/v1/info`)).json()
    const facts = await page.locator('section.card dl.facts').first().innerText()
    assert.match(facts, new RegExp(`Version\\s+${info.version.replaceAll('.', '\\.')}`))
    assert.match(facts, /Writes over HTTP\s+disabled/)
    assert.match(facts, /Cluster\s+a single node/)
    assert.match(await page.locator('#server-facts').innerText(), /read-only/)

    // Every topic's groups with their lag, as the CLI lists them.
    for (const [topic, group] of [['shop/orders', 'billing'], ['shop/payments', 'live']]) {
      const listed = (await listGroups(server, topic)).find((g) => g.group === group)
      const row = page.locator(`tr[data-group="${group}"]`)
      await row.waitFor()
      assert.deepEqual(await cells(row), [group, topic, String(listed.members), count(listed.lag)])
    }

    // Without --http-admin-writes there is nothing to write with.
    assert.equal(await page.getByRole('button', { name: 'Create topic' }).count(), 0)

    // The sampler reads the counters every 5 s; its second sample gives the first
    // rates, which the chart draws (in and out, records and bytes).
    await page.locator('.chart svg path.series').first().waitFor({ timeout: 20_000 })
    assert.equal(await page.locator('.chart svg path.series').count(), 4)
    const label = await page.locator('.chart svg').first().getAttribute('aria-label')
    assert.match(label, /^Records per second in and out from \d\d:\d\d:\d\d to \d\d:\d\d:\d\d; latest: in [\d.,k]+, out [\d.,k]+$/)
    await check('overview')
  })

  test('topic page: options and partitions with their offsets, no delete without writes', async () => {
    await visit('#/topics/shop/orders')
    const d = await describeTopic(server, 'shop/orders')
    await page.locator('tr[data-partition]').first().waitFor()
    assert.equal(await page.locator('tr[data-partition]').count(), 3)
    for (const p of d.partitions) {
      const [partition, first, next, records, , segments, status, damaged] = await cells(page.locator(`tr[data-partition="${p.partition}"]`))
      assert.equal(partition, String(p.partition))
      assert.equal(first, count(p.first_offset), `partition ${p.partition} first offset`)
      assert.equal(next, count(p.next_offset), `partition ${p.partition} next offset`)
      assert.equal(records, count(p.next_offset - p.first_offset))
      assert.equal(segments, String(p.segments))
      assert.equal(status, 'ok')
      assert.equal(damaged, '—')
    }
    const options = await page.locator('section:has(h2:text-is("Options")) dl').innerText()
    assert.match(options, /Partitions\s+3/)
    assert.match(options, /Durability\s+always/)
    assert.match(options, /Retention time\s+none/)
    assert.equal(await page.getByRole('button', { name: 'Delete topic' }).count(), 0)
    assert.equal(await page.getByRole('button', { name: 'Change topic' }).count(), 0)
    assert.equal(await page.locator('tr[data-partition="1"] a').getAttribute('href'), '#/topics/shop/orders/messages?partition=1')

    // Its group and its named consumer, with their lag as the CLI lists them.
    const billing = (await listGroups(server, 'shop/orders')).find((g) => g.group === 'billing')
    await page.locator('tr[data-group="billing"]').waitFor()
    assert.deepEqual(await cells(page.locator('tr[data-group="billing"]')), ['billing', '0', count(billing.lag)])
    const [audit] = (await rillJson(server, ['consumer', 'list', 'shop/orders'])).consumers
    assert.equal(audit.consumer, 'audit')
    assert.deepEqual(await cells(page.locator('tr[data-consumer="audit"]')), [
      'audit',
      audit.partitions.map((p) => `${p.partition}: ${count(p.next_offset)}`).join(', '),
      count(audit.lag),
    ])
    assert.equal(await page.getByRole('button', { name: 'Reset' }).count(), 0)
    await check('topic')
  })

  test('an elastic topic: its key ranges by lineage, with bounds, state, parents and records', async () => {
    await visit('#/topics/shop/carts')
    const d = await (await fetch(`${server.http}/api/v1/streams/shop/topics/carts`)).json()
    assert.equal(d.elastic, true)
    assert.equal(d.range_epoch, 1)
    // Two initial ranges, the first sealed and split into two.
    assert.deepEqual(d.ranges.map((r) => [r.id, r.parents, r.sealed_at !== null]),
      [[0, [], true], [1, [], false], [2, [0], false], [3, [0], false]])
    await page.locator('tr[data-range]').first().waitFor()
    assert.deepEqual(await page.locator('tr[data-range]').evaluateAll((trs) => trs.map((tr) => [tr.dataset.range, tr.dataset.depth])),
      [['0', '0'], ['1', '0'], ['2', '1'], ['3', '1']])
    for (const r of d.ranges) {
      const [id, hashes, state, from, records, rate] = await cells(page.locator(`tr[data-range="${r.id}"]`))
      assert.equal(id.replace('└', '').trim(), String(r.id))
      assert.equal(hashes, `${r.lo}–${r.hi}`)
      assert.equal(state, r.sealed_at === null ? 'open' : `sealed at ${count(r.sealed_at)}`)
      assert.equal(from, r.parents.length ? r.parents.join(', ') : '—')
      const p = d.partitions.find((p) => p.partition === r.id)
      assert.equal(records, count(p.records), `range ${r.id}`)
      // A sealed range takes no writes: no rate. An open one's changes with each sample.
      if (r.sealed_at !== null) assert.equal(rate, '—')
    }
    // Children are indented under their parents.
    const indent = (id) => page.locator(`tr[data-range="${id}"] .range-id`).evaluate((el) => parseFloat(getComputedStyle(el).paddingLeft))
    assert.equal(await indent(0), 0)
    assert.ok(await indent(2) > 0, 'a child range is indented')
    assert.match(d.ranges[0].lo, /^0x[0-9a-f]{16}$/)
    assert.equal(d.ranges[1].hi, '0xffffffffffffffff')
    assert.match(await page.locator('section:has(h2:text-is("Key ranges"))').innerText(), /Epoch 1: 3 open of 4/)
    await check('elastic-topic')
    // A plain topic has no key ranges.
    await visit('#/topics/shop/orders')
    await page.locator('tr[data-partition]').first().waitFor()
    assert.equal(await page.locator('section:has(h2:text-is("Key ranges"))').isVisible(), false)
  })

  test('message browser: JSON, typed headers, text, hex, markup as text, long values, paging', async () => {
    await visit('#/topics/shop/events/messages?partition=0')
    const records = page.locator('details.record')
    await records.first().waitFor()
    assert.equal(await records.count(), 20)
    assert.equal(await page.locator('.range').innerText(),
      `Partition 0 holds offsets 0 to ${HEAD_RECORDS + FILLER_RECORDS - 1} (${HEAD_RECORDS + FILLER_RECORDS} records).`)
    const record = (offset) => page.locator(`details.record[data-offset="${offset}"]`)

    // The order: key, four typed headers, the value pretty-printed with its big integer
    // exactly as written.
    assert.equal(await record(0).locator('.r-key').innerText(), 'customer-1')
    assert.equal(await record(0).locator('.r-headers').innerText(), '4 headers')
    await record(0).locator('summary').click()
    // The details are built on the 'toggle' event, a task after the click: wait for
    // them (evaluateAll does not wait for rows to exist).
    await record(0).locator('tbody tr').first().waitFor()
    const headerRows = await record(0).locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent)))
    assert.deepEqual(headerRows, [
      ['trace', 'str', 'abc-123'],
      ['attempt', 'u64', '3'],
      ['retry', 'bool', 'true'],
      ['sig', 'bytes', '3q2+7w=='],
    ])
    const value = record(0).locator('pre.value')
    assert.equal(await value.getAttribute('data-view'), 'json')
    const pretty = await value.textContent()
    assert.ok(pretty.startsWith('{\n  "order": 1001,\n  "customer": "customer-1",\n  "total": 12.5,\n  "items": [\n    {\n      "sku": "A-1",'), pretty)
    assert.ok(pretty.includes(`"big": ${BIG},`), pretty)
    assert.ok(pretty.includes('"note": "<img src=x onerror=\\"window.__xss=1\\">"'), pretty)
    assert.equal(await record(0).locator('.j-key').first().textContent(), '"order"')

    // A key, a header and a value that look like markup stay text: nothing ran, no
    // element was made from them.
    assert.equal(await record(1).locator('.r-key').textContent(), MARKUP_KEY)
    await record(1).locator('summary').click()
    assert.equal(await record(1).locator('tbody td').first().textContent(), '<i>h</i>')
    assert.deepEqual(await page.evaluate(() => [window.__xss, document.scripts.length, document.images.length]), [undefined, 1, 1])

    // Text, then its hex dump.
    assert.equal(await record(2).locator('.r-value').innerText(), TEXT_VALUE)
    assert.equal(await record(2).locator('.r-key').innerText(), 'no key')
    await record(2).locator('summary').click()
    assert.equal(await record(2).getByRole('button', { name: 'JSON' }).isDisabled(), true)
    assert.equal(await record(2).locator('pre.value').textContent(), TEXT_VALUE)
    await record(2).getByRole('button', { name: 'Hex' }).click()
    assert.equal(await record(2).locator('pre.value').textContent(),
      '00000000  68 65 6c 6c 6f 20 66 72  6f 6d 20 72 69 6c 6c     |hello from rill|')
    assert.equal(await record(2).getByRole('button', { name: 'Hex' }).getAttribute('aria-pressed'), 'true')

    // Bytes that are not UTF-8 are shown in hex, with no JSON or text view.
    await record(3).locator('summary').click()
    assert.equal(await record(3).locator('pre.value').getAttribute('data-view'), 'hex')
    assert.equal(await record(3).locator('pre.value').textContent(),
      '00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|\n'
      + '00000010  10 11 12 ff                                       |....|')
    assert.equal(await record(3).getByRole('button', { name: 'Text' }).isDisabled(), true)

    // A long value is cut, with a button for the rest.
    await record(4).locator('summary').click()
    const long = record(4).locator('pre.value')
    assert.ok(!(await long.textContent()).includes('"row number 199"'))
    await record(4).getByRole('button', { name: 'Show all of it' }).click()
    assert.ok((await long.textContent()).includes('"label": "row number 199"'))
    await record(4).locator('summary').click()
    await check('messages')

    // The same record in hex, for the screenshot.
    await record(0).getByRole('button', { name: 'Hex' }).click()
    assert.ok((await value.textContent()).startsWith('00000000  7b 22 6f 72 64 65 72 22  3a 31 30 30 31 2c 22 63  |{"order":1001,"c|'))
    await record(0).scrollIntoViewIfNeeded()
    await check('messages-hex')

    // Paging forwards and backwards, and the browser's back button.
    const firstOffset = () => records.first().getAttribute('data-offset')
    await page.getByRole('link', { name: 'Newer →' }).click()
    await page.waitForFunction(() => document.querySelector('details.record')?.dataset.offset === '20')
    assert.equal(await records.count(), HEAD_RECORDS + FILLER_RECORDS - 20)
    assert.match(page.url(), /offset=20/)
    assert.equal(await page.getByRole('link', { name: 'Newer →' }).getAttribute('aria-disabled'), '')
    await page.getByRole('link', { name: '← Older' }).click()
    await page.waitForFunction(() => document.querySelector('details.record')?.dataset.offset === '0')
    assert.match(page.url(), /offset=0/)
    await page.goBack()
    await page.waitForFunction(() => document.querySelector('details.record')?.dataset.offset === '20')
    assert.equal(await firstOffset(), '20')
    await page.goBack()
    await page.waitForFunction(() => document.querySelector('details.record')?.dataset.offset === '0' && !location.hash.includes('offset'))

    // From an offset typed into the form.
    await page.locator('#m-mode').selectOption('offset')
    await page.locator('#m-offset').fill('7')
    await page.getByRole('button', { name: 'Show' }).click()
    await page.waitForFunction(() => document.querySelector('details.record')?.dataset.offset === '7')
    assert.equal(await records.count(), 18)

    // From a time: the filler records came 50 ms after the first five.
    const fifth = JSON.parse(await rill(server, ['consume', 'shop/events', '--from', `offset:${HEAD_RECORDS}`, '--count', '1', '--format', 'json']))
    const at = new Date(Math.floor(fifth.timestamp_us / 1000)).toISOString()
    await visit(`#/topics/shop/events/messages?partition=0&time=${encodeURIComponent(at)}`)
    await page.waitForFunction((o) => document.querySelector('details.record')?.dataset.offset === o, String(HEAD_RECORDS))
    assert.equal(await page.locator('#m-mode').inputValue(), 'time')
  })

  test('live refresh: the latest records follow new ones, and nothing is asked while the tab is hidden', async () => {
    await visit('#/topics/shop/events/messages?partition=0&from=latest')
    const last = HEAD_RECORDS + FILLER_RECORDS - 1
    const shows = (offset) => page.locator(`details.record[data-offset="${offset}"]`)
    await shows(last).waitFor()
    await rill(server, ['produce', 'shop/events'], { input: 'live one\n' })
    // The next refresh (every 5 s) brings it.
    await shows(last + 1).waitFor({ timeout: 8_000 })
    assert.equal(await shows(last + 1).locator('.r-value').innerText(), 'live one')

    // Headless Chromium keeps every tab visible, so the page is told it is hidden the
    // way a browser tells it: document.hidden and a visibilitychange event.
    const setHidden = (hidden) => page.evaluate((value) => {
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => value })
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (value ? 'hidden' : 'visible') })
      document.dispatchEvent(new Event('visibilitychange'))
    }, hidden)
    await setHidden(true)
    // A refresh that was under way when the tab was hidden may still finish.
    await page.waitForTimeout(1_000)
    const asked = []
    const onRequest = (request) => { if (request.url().includes('/api/')) asked.push(request.url()) }
    page.on('request', onRequest)
    await rill(server, ['produce', 'shop/events'], { input: 'live two\n' })
    await page.waitForTimeout(6_000)
    page.off('request', onRequest)
    assert.deepEqual(asked, [], 'requests while hidden')
    assert.equal(await shows(last + 2).count(), 0)
    // Visible again: refreshed at once.
    await setHidden(false)
    await shows(last + 2).waitFor({ timeout: 2_000 })
  })

  test('group page: members, assignment, stored offsets and lag per partition', async () => {
    const g = await describeGroup(server, 'shop/orders', 'billing')
    assert.equal(g.lag, g.partitions.reduce((sum, p) => sum + p.log_end, 0) - BILLING_CONSUMED)
    await visit('#/topics/shop/orders/groups/billing')
    await page.locator('#group-lag').waitFor()
    assert.equal(await page.locator('#group-lag').innerText(), count(g.lag))
    for (const p of g.partitions) {
      const [partition, owner, stored, end, lag] = await cells(page.locator(`tr[data-partition="${p.partition}"]`))
      assert.equal(partition, String(p.partition))
      assert.equal(owner, 'unassigned')
      assert.equal(stored, p.stored_offset === null ? 'none' : count(p.stored_offset), `partition ${p.partition}`)
      assert.equal(end, count(p.log_end))
      assert.equal(lag, count(p.lag), `partition ${p.partition} lag`)
    }
    assert.match(await page.locator('section:has(h2:text-is("Members"))').innerText(), /No live members/)
    assert.equal(await page.getByRole('button', { name: 'Reset offsets' }).count(), 0)
    assert.equal(await page.getByRole('button', { name: 'Delete group' }).count(), 0)
    // The lag per partition is charted from the first refresh on.
    await page.locator('section:has(h2:text-matches("Lag per partition")) svg').waitFor()
    await check('group')

    // A group with a live member: the member and what it owns.
    await visit('#/topics/shop/payments/groups/live')
    const row = page.locator('tr[data-member="m-live"]')
    await row.waitFor()
    assert.deepEqual((await cells(row)).slice(0, 2), ['m-live', '0'])
    assert.equal((await cells(page.locator('tr[data-partition="0"]')))[1], 'm-live')
    await check('group-live')
  })

  test('an unknown page and an unknown topic say so', async () => {
    await visit('#/no/such/page')
    assert.equal(await page.locator('main h1').innerText(), 'No such page')
    const stop = browser.expectErrors(/status of 404/)
    await visit('#/topics/shop/nope')
    await page.locator('main > p.error').waitFor()
    assert.match(await page.locator('main > p.error').innerText(), /There is no topic shop\/nope/)
    stop()
  })

  test('the banner shows while the server is down and goes when it is back', async () => {
    await stopProcess(member)
    await visit('#/')
    await page.locator('tr[data-topic]').first().waitFor()
    assert.equal(await page.locator('#banner').isVisible(), false)
    // While the server is down, a request may fail in any of the ways
    // Chromium reports a lost connection (refused, reset, empty, not
    // connected), depending on where the stop caught it.
    const stop = browser.expectErrors(/net::ERR_(CONNECTION_REFUSED|CONNECTION_RESET|EMPTY_RESPONSE|SOCKET_NOT_CONNECTED|CONNECTION_CLOSED)/)
    await server.stop()
    await page.locator('#banner').waitFor({ state: 'visible', timeout: 12_000 })
    assert.match(await page.locator('#banner').innerText(), /cannot be reached/)
    // What was shown stays, marked out of date by the banner.
    assert.ok(await page.locator('tr[data-topic="shop/orders"]').isVisible())
    await check('unreachable')
    server = await restart(server)
    await page.locator('#banner').waitFor({ state: 'hidden', timeout: 12_000 })
    stop()
    await page.locator('tr[data-topic="shop/orders"]').waitFor()
  })

  test('nothing was logged as an error in the browser', () => {
    assert.deepEqual(browser.errors, [])
  })
})
