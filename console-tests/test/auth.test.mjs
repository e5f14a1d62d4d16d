// The console on a server with --auth: the page itself asks for HTTP Basic (a 401 with
// WWW-Authenticate: Basic makes the browser prompt), and once the browser has the
// credential the console's API requests carry it, so it works as the signed-in user.

import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { OUTPUT, launch, screenshot } from '../lib/browser.mjs'
import { rill, startServer, tempDir } from '../lib/server.mjs'

const PASSWORD = 'console-test-password'

describe('the console of a server with --auth', () => {
  let server
  let browser
  let secrets

  before(async () => {
    secrets = tempDir('rill-console-secrets-')
    const file = path.join(secrets, 'admin-password')
    fs.writeFileSync(file, `${PASSWORD}\n`, { mode: 0o600 })
    server = await startServer({ args: ['--auth', '--admin-password-file', file] })
    await rill(server, ['topic', 'create', 'shop/orders', '--partitions', '2'], {
      env: { RILL_USER: 'admin', RILL_PASSWORD: PASSWORD },
    })
  })

  after(async () => {
    if (browser) await browser.close()
    if (server) {
      await server.stop()
      fs.rmSync(server.data, { recursive: true, force: true })
    }
    if (secrets) fs.rmSync(secrets, { recursive: true, force: true })
  })

  test('the page and its files ask for HTTP Basic without a credential', async () => {
    for (const url of ['/', '/assets/js/main.js', '/api/v1/info']) {
      const response = await fetch(`${server.http}${url}`)
      assert.equal(response.status, 401, url)
      assert.match(response.headers.get('www-authenticate'), /^Basic realm="rill"/, url)
    }
  })

  test('with the credential the console works as the signed-in user', async () => {
    browser = await launch({ httpCredentials: { username: 'admin', password: PASSWORD } })
    console.log(`screenshots go to ${OUTPUT}`)
    const { page } = browser
    await page.goto(`${server.http}/`)
    await page.locator('tr[data-topic="shop/orders"]').waitFor()
    assert.match(await page.locator('#server-facts').innerText(), /signed in as admin/)
    const facts = await page.locator('section.card dl.facts').first().innerText()
    assert.match(facts, /Authentication\s+required/)
    assert.match(facts, /Signed in as\s+admin/)
    await screenshot(page, 'auth-overview')
    assert.deepEqual(browser.errors, [])
  })
})
