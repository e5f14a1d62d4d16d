// Headless Chromium (Debian's package) driven by Playwright, with a fresh profile per
// launch, the laptop screen the console must fit (1366×768), a record of everything
// the page logs as an error, and the directory screenshots go to.

import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'
import { tempDir } from './server.mjs'

const here = path.dirname(fileURLToPath(import.meta.url))
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium'
export const OUTPUT = path.resolve(process.env.CONSOLE_TEST_OUTPUT || path.join(here, '..', 'output'))
export const VIEWPORT = { width: 1366, height: 768 }

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]

/**
 * Launches Chromium with a fresh user data directory. Resolves `{context, page,
 * errors, expectErrors(pattern), close()}`: `errors` gathers the page's console
 * errors and uncaught exceptions, except those matching a pattern passed to
 * `expectErrors` while it is in force (a deliberate outage, a refused write).
 */
export async function launch({ httpCredentials } = {}) {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`Chromium is not installed at ${CHROMIUM}, and the web console's browser tests need it. `
      + 'Install it with `sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium` '
      + '(Debian or Ubuntu), or set CHROMIUM to the path of a Chromium binary.')
  }
  fs.mkdirSync(OUTPUT, { recursive: true })
  const profile = tempDir('rill-console-chromium-')
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ARGS,
    headless: true,
    viewport: VIEWPORT,
    httpCredentials,
    locale: 'en-US',
    timezoneId: 'UTC',
  })
  const page = context.pages()[0] || await context.newPage()
  const errors = []
  const expected = new Set()
  const record = (text) => {
    if ([...expected].some((pattern) => pattern.test(text))) return
    errors.push(text)
  }
  page.on('console', (message) => {
    if (message.type() === 'error') {
      const where = message.location()
      record(`${message.text()}${where && where.url ? ` (${where.url})` : ''}`)
    }
  })
  page.on('pageerror', (error) => record(`uncaught: ${error.stack || error}`))
  // Any dialog of the browser's own (alert, confirm) would be a console bug, or
  // script run from record content: note it and dismiss it.
  page.on('dialog', async (dialog) => {
    record(`unexpected ${dialog.type()} dialog: ${dialog.message()}`)
    await dialog.dismiss()
  })
  return {
    context,
    page,
    errors,
    /** Ignores console errors matching `pattern` until the returned function is called. */
    expectErrors(pattern) {
      expected.add(pattern)
      return () => expected.delete(pattern)
    },
    async close() {
      await context.close()
      fs.rmSync(profile, { recursive: true, force: true })
    },
  }
}

/** Saves a full-page screenshot as OUTPUT/NAME.png; resolves its path. */
export async function screenshot(page, name) {
  const file = path.join(OUTPUT, `${name}.png`)
  await page.screenshot({ path: file, fullPage: true })
  return file
}

/** How far the page scrolls sideways (0 when it fits the window's width). */
export function horizontalOverflow(page) {
  return page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)
}
