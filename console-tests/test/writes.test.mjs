// The console's write actions on a server started with --http-admin-writes: creating
// a topic through the form, a refusal shown in words, changing and purging a topic,
// resetting and deleting a group, deleting a topic after typing its
// name; each checked against what the CLI then says.

import assert from 'node:assert/strict'
import fs from 'node:fs'
import { after, before, describe, test } from 'node:test'
import { OUTPUT, horizontalOverflow, launch, screenshot } from '../lib/browser.mjs'
import { describeTopic } from '../lib/data.mjs'
import { rill, rillJson, startServer } from '../lib/server.mjs'

/** Records produced to shop/orders (spread over its partitions). */
const RECORDS = 10

describe('the console of a server that takes writes', () => {
  let server
  let browser
  let page

  before(async () => {
    server = await startServer({ args: ['--http-admin-writes'] })
    await rill(server, ['topic', 'create', 'shop/orders', '--partitions', '2'])
    const values = Array.from({ length: RECORDS }, (_, i) => `order ${i}`)
    await rill(server, ['produce', 'shop/orders'], { input: `${values.join('\n')}\n` })
    await rill(server, ['consume', 'shop/orders', '--group', 'g1', '--count', String(RECORDS)])
    await rill(server, ['consume', 'shop/orders', '--name', 'c1', '--count', '4'])
    browser = await launch()
    page = browser.page
    console.log(`screenshots go to ${OUTPUT}`)
  })

  after(async () => {
    if (browser) await browser.close()
    if (server) {
      await server.stop()
      fs.rmSync(server.data, { recursive: true, force: true })
    }
  })

  test('create a topic through the form', async () => {
    await page.goto(`${server.http}/#/`)
    await page.locator('tr[data-topic="shop/orders"]').waitFor()
    assert.match(await page.locator('#server-facts').innerText(), /writes enabled/)
    await page.getByRole('button', { name: 'Create topic' }).click()
    const dialog = page.getByRole('dialog', { name: 'Create a topic' })
    await dialog.waitFor()
    await dialog.getByLabel('Stream').fill('web')

    // A name the protocol refuses is pointed at before anything is sent.
    await dialog.getByLabel('Topic').fill('bad name')
    await dialog.getByRole('button', { name: 'Create topic' }).click()
    assert.match(await dialog.getByLabel('Topic').evaluate((el) => el.validationMessage), /letters, digits/)
    assert.ok(await dialog.isVisible())

    await dialog.getByLabel('Topic').fill('clicks')
    await dialog.getByLabel('Partitions').fill('2')
    await dialog.getByLabel('Retention time').fill('3')
    await dialog.getByLabel('Durability').selectOption('never')
    await screenshot(page, 'writes-create')
    assert.equal(await horizontalOverflow(page), 0)
    await dialog.getByRole('button', { name: 'Create topic' }).click()
    await dialog.waitFor({ state: 'detached' })
    assert.match(await page.locator('#notice').innerText(), /Created topic web\/clicks/)
    const row = page.locator('tr[data-topic="web/clicks"]')
    await row.waitFor()
    assert.equal((await row.locator('td').allInnerTexts())[1], '2')

    const d = await describeTopic(server, 'web/clicks')
    assert.equal(d.options.partitions, 2)
    assert.equal(d.options.retention_ms, 3 * 86_400_000)
    assert.equal(d.options.durability, 'never')
  })

  test('a refused write is shown in words in the dialog', async () => {
    await page.getByRole('button', { name: 'Create topic' }).click()
    const dialog = page.getByRole('dialog', { name: 'Create a topic' })
    await dialog.getByLabel('Stream').fill('shop')
    await dialog.getByLabel('Topic').fill('orders')
    const stop = browser.expectErrors(/status of 409/)
    await dialog.getByRole('button', { name: 'Create topic' }).click()
    const error = dialog.getByRole('alert')
    await error.waitFor()
    assert.match(await error.innerText(), /^The server refused: .*shop\/orders.*\(TOPIC_EXISTS\)$/)
    stop()
    await screenshot(page, 'writes-refused')
    await dialog.getByRole('button', { name: 'Cancel' }).click()
    await dialog.waitFor({ state: 'detached' })
  })

  test('change a topic: retention and more partitions', async () => {
    await page.goto(`${server.http}/#/topics/shop/orders`)
    await page.locator('tr[data-partition="1"]').waitFor()
    await page.getByRole('button', { name: 'Change topic' }).click()
    const dialog = page.getByRole('dialog', { name: 'Change shop/orders' })
    await dialog.waitFor()
    // Nothing changed is said, not sent.
    await dialog.getByRole('button', { name: 'Change topic' }).click()
    assert.match(await dialog.getByRole('alert').innerText(), /Nothing is changed/)
    await dialog.getByLabel('Retention time', { exact: true }).selectOption('set')
    await dialog.getByLabel('New retention time').fill('1')
    await dialog.getByLabel('Partitions').fill('3')
    await screenshot(page, 'writes-alter')
    await dialog.getByRole('button', { name: 'Change topic' }).click()
    await dialog.waitFor({ state: 'detached' })
    assert.match(await page.locator('#notice').innerText(), /Changed topic shop\/orders/)
    await page.locator('tr[data-partition="2"]').waitFor()
    assert.match(await page.locator('section:has(h2:text-is("Options")) dl').innerText(), /Retention time\s+1 d/)
    const d = await describeTopic(server, 'shop/orders')
    assert.equal(d.options.retention_ms, 86_400_000)
    assert.equal(d.options.partitions, 3)
  })

  test('reset a group to the first offsets, then delete it', async () => {
    const before = await rillJson(server, ['group', 'describe', 'shop/orders', 'g1'])
    assert.equal(before.lag, 0)
    await page.goto(`${server.http}/#/topics/shop/orders/groups/g1`)
    await page.locator('#group-lag').waitFor()
    assert.equal(await page.locator('#group-lag').innerText(), '0')
    await page.getByRole('button', { name: 'Reset offsets' }).click()
    const dialog = page.getByRole('dialog', { name: 'Reset the offsets of group g1' })
    await dialog.getByLabel('Move to').selectOption('first')
    await screenshot(page, 'writes-reset')
    await dialog.getByRole('button', { name: 'Reset offsets' }).click()
    await dialog.waitFor({ state: 'detached' })
    assert.match(await page.locator('#notice').innerText(), /Reset group g1: partition 0 at 0/)
    await page.waitForFunction((n) => document.querySelector('#group-lag')?.textContent === String(n), RECORDS)
    const after = await rillJson(server, ['group', 'describe', 'shop/orders', 'g1'])
    assert.equal(after.lag, RECORDS)
    assert.ok(after.partitions.every((p) => p.stored_offset === 0 || p.log_end === 0), JSON.stringify(after))

    await page.getByRole('button', { name: 'Delete group' }).click()
    const confirm = page.getByRole('dialog', { name: 'Delete group g1?' })
    await confirm.getByLabel('Type g1 to confirm').fill('g1')
    await confirm.getByRole('button', { name: 'Delete group' }).click()
    await page.waitForURL(/#\/topics\/shop\/orders$/)
    assert.match(await page.locator('#notice').innerText(), /Deleted group g1/)
    const listed = (await rillJson(server, ['group', 'list', 'shop/orders'])).groups
    assert.deepEqual(listed.map((g) => g.group), [])
    await page.locator('section:has(h2:text-matches("Consumer groups")) td.empty').waitFor()
  })

  test('reset a named consumer to the end', async () => {
    await page.goto(`${server.http}/#/topics/shop/orders`)
    const row = page.locator('tr[data-consumer="c1"]')
    await row.waitFor()
    const [before] = (await rillJson(server, ['consumer', 'list', 'shop/orders'])).consumers
    assert.ok(before.lag > 0, JSON.stringify(before))
    assert.equal((await row.locator('td').allInnerTexts())[2], String(before.lag))
    await row.getByRole('button', { name: 'Reset' }).click()
    const dialog = page.getByRole('dialog', { name: 'Reset the offsets of named consumer c1' })
    await dialog.getByLabel('Move to').selectOption('end')
    await dialog.getByRole('button', { name: 'Reset offsets' }).click()
    await dialog.waitFor({ state: 'detached' })
    await page.waitForFunction(() => document.querySelector('tr[data-consumer="c1"] td:nth-child(3)')?.textContent === '0')
    const [c1] = (await rillJson(server, ['consumer', 'list', 'shop/orders'])).consumers
    assert.equal(c1.lag, 0)
  })

  test('purge the records before an offset, confirmed by the topic\'s name', async () => {
    await page.goto(`${server.http}/#/topics/shop/orders`)
    await page.locator('tr[data-partition="0"]').waitFor()
    await page.getByRole('button', { name: 'Purge records' }).click()
    const dialog = page.getByRole('dialog', { name: 'Purge records of shop/orders?' })
    await dialog.waitFor()
    await dialog.getByLabel('Offset').fill('2')
    await dialog.getByLabel('Partitions').selectOption('0')
    const submit = dialog.getByRole('button', { name: 'Purge records' })
    assert.equal(await submit.isDisabled(), true, 'nothing is purged before the name is typed')
    await dialog.getByLabel('Type shop/orders to confirm').fill('shop/orders')
    await screenshot(page, 'writes-purge')
    await submit.click()
    await dialog.waitFor({ state: 'detached' })
    assert.match(await page.locator('#notice').innerText(), /Purged shop\/orders: partition 0 starts at 2/)
    const d = await describeTopic(server, 'shop/orders')
    assert.equal(d.partitions[0].first_offset, 2)
    assert.equal(d.partitions[1].first_offset, 0, 'only partition 0')
  })

  test('delete a topic after typing its name', async () => {
    await page.goto(`${server.http}/#/topics/web/clicks`)
    await page.getByRole('button', { name: 'Delete topic' }).click()
    const dialog = page.getByRole('dialog', { name: 'Delete web/clicks?' })
    await dialog.waitFor()
    const confirm = dialog.getByRole('button', { name: 'Delete topic' })
    assert.equal(await confirm.isDisabled(), true)
    await dialog.getByLabel('Type web/clicks to confirm').fill('web/click')
    assert.equal(await confirm.isDisabled(), true)
    await dialog.getByLabel('Type web/clicks to confirm').fill('web/clicks')
    assert.equal(await confirm.isDisabled(), false)
    await screenshot(page, 'writes-delete')
    await confirm.click()
    await page.waitForURL(/#\/$/)
    assert.match(await page.locator('#notice').innerText(), /Deleted topic web\/clicks/)
    await page.locator('tr[data-topic="shop/orders"]').waitFor()
    assert.equal(await page.locator('tr[data-topic="web/clicks"]').count(), 0)
    await assert.rejects(describeTopic(server, 'web/clicks'), /does not exist/)
  })

  test('nothing was logged as an error in the browser', () => {
    assert.deepEqual(browser.errors, [])
  })
})
