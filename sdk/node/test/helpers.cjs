'use strict'
// Test helpers: a fresh data directory, and a real `rill serve` on free ports.
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { Rill } = require('..')

const RILL_BIN = process.env.RILL_BIN || path.resolve(__dirname, '../../../target/debug/rill')

function tempDir() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'rill-node-'))
}

/** Starts `rill serve` on 127.0.0.1 free ports; resolves `{url, stop}`. */
function startServer() {
  const dir = tempDir()
  const child = spawn(RILL_BIN, ['serve', '--data', dir, '--listen', '127.0.0.1:0', '--http', '127.0.0.1:0'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  return new Promise((resolve, reject) => {
    let stderr = ''
    const timer = setTimeout(() => reject(new Error(`rill serve did not start: ${stderr}`)), 20_000)
    child.on('exit', (code) => reject(new Error(`rill serve exited (${code}): ${stderr}`)))
    child.stderr.on('data', (chunk) => {
      stderr += chunk
      const m = /rill listening on (\S+)\s/.exec(stderr)
      if (m) {
        clearTimeout(timer)
        child.stderr.removeAllListeners('data')
        child.stderr.resume()
        resolve({
          url: `rill://${m[1]}`,
          child,
          async stop() {
            child.removeAllListeners('exit')
            if (child.exitCode === null) {
              const done = new Promise((r) => child.once('exit', r))
              child.kill('SIGTERM')
              await done
            }
            fs.rmSync(dir, { recursive: true, force: true })
          },
        })
      }
    })
  })
}

/** The two transports every test runs over: `[name, setup]`, where setup resolves
 * `{client, url?, teardown}`. */
const TRANSPORTS = [
  ['embedded', async () => {
    const dir = tempDir()
    const client = await Rill.open(dir)
    return { client, dir, async teardown() { await client.close(); fs.rmSync(dir, { recursive: true, force: true }) } }
  }],
  ['server', async () => {
    const server = await startServer()
    const client = await Rill.connect(server.url)
    return { client, url: server.url, server, async teardown() { await client.close(); await server.stop() } }
  }],
]

let counter = 0
function unique(prefix) {
  counter += 1
  return `${prefix}-${process.pid}-${counter}`
}

module.exports = { RILL_BIN, tempDir, startServer, TRANSPORTS, unique }
