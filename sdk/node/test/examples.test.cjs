'use strict'
// The examples run, embedded and against a server, and print what they promise.
const test = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { tempDir, startServer } = require('./helpers.cjs')

// In a directory of the test's own: the quickstart writes its cursor file where it runs.
const run = (name, arg, cwd) =>
  execFileSync(process.execPath, [path.join(__dirname, '..', 'examples', name), arg], { encoding: 'utf8', timeout: 60_000, cwd })

test('examples run embedded', (t) => {
  const dir = tempDir()
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  const q = run('quickstart.mjs', path.join(dir, 'data'), dir)
  assert.match(q, /published order 5/)
  assert.match(q, /read 5 orders/)
  assert.match(run('quickstart.mjs', path.join(dir, 'data'), dir), /read 5 orders/, 'the cursor file resumes after the first 5')
  assert.match(run('producer.mjs', path.join(dir, 'p')), /sent 100 messages/)
  assert.match(run('consumer.mjs', path.join(dir, 'c')), /handled 10 jobs/)
})

test('examples run against a server', async () => {
  const server = await startServer()
  try {
    assert.match(run('producer.mjs', server.url), /sent 100 messages/)
    assert.match(run('consumer.mjs', server.url), /handled 10 jobs/)
  } finally {
    await server.stop()
  }
})
