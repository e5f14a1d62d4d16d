// A real `rill serve` for the browser tests, and the `rill` CLI to load it with data.
// The binary is $RILL_BIN (default: the workspace's target/debug/rill).

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
export const RILL_BIN = process.env.RILL_BIN || path.resolve(here, '../../target/debug/rill')

function checkBinary() {
  if (!fs.existsSync(RILL_BIN)) {
    throw new Error(`no rill binary at ${RILL_BIN}: build it with \`cargo build -p rill-cli\` or set RILL_BIN`)
  }
}

/** A fresh directory under the system's temporary directory. */
export function tempDir(prefix = 'rill-console-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix))
}

/**
 * Starts `rill serve` with a fresh data directory (or `data`), on free ports of
 * 127.0.0.1 (or the given `listen` and `http` addresses, to come back on the same ones
 * after a stop). Resolves `{url, http, listen, httpAddr, data, stop(), log()}`.
 */
export function startServer({ args = [], data, listen = '127.0.0.1:0', http = '127.0.0.1:0', env = {} } = {}) {
  checkBinary()
  const dir = data || tempDir()
  const child = spawn(RILL_BIN, ['serve', '--data', dir, '--listen', listen, '--http', http, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, RILL_LOG: 'warn', ...env },
  })
  let stderr = ''
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk) => { stderr += chunk })
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`rill serve did not start within 20 s:\n${stderr}`))
    }, 20_000)
    const onExit = (code) => {
      clearTimeout(timer)
      reject(new Error(`rill serve exited (${code}) before listening:\n${stderr}`))
    }
    child.once('exit', onExit)
    const onData = () => {
      const m = /rill listening on (\S+) \(http (\S+)\)/.exec(stderr)
      if (!m) return
      clearTimeout(timer)
      child.off('exit', onExit)
      child.stderr.off('data', onData)
      resolve({
        url: `rill://${m[1]}`,
        http: `http://${m[2]}`,
        listen: m[1],
        httpAddr: m[2],
        data: dir,
        child,
        log: () => stderr,
        /** SIGTERM, and wait for the exit; the data directory stays. */
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return
          const done = new Promise((r) => child.once('exit', r))
          child.kill('SIGTERM')
          await done
        },
      })
    }
    child.stderr.on('data', onData)
  })
}

/** Starts the server again on the same data directory and the same addresses. */
export async function restart(server, options = {}) {
  await server.stop()
  // The port was just released by a process that exited; a bind can still race with
  // the kernel's cleanup for a moment, so try a few times.
  let last
  for (let attempt = 0; attempt < 20; attempt += 1) {
    try {
      return await startServer({ ...options, data: server.data, listen: server.listen, http: server.httpAddr })
    } catch (e) {
      last = e
      await new Promise((r) => setTimeout(r, 250))
    }
  }
  throw last
}

/** Runs `rill --server URL ARGS…` with `input` on stdin; resolves stdout, rejects with
 * stderr on a non-zero exit. */
export function rill(server, args, { input, env = {} } = {}) {
  checkBinary()
  return new Promise((resolve, reject) => {
    const child = spawn(RILL_BIN, ['--server', server.url, ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, RILL_LOG: 'warn', ...env },
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8')
    child.stderr.setEncoding('utf8')
    child.stdout.on('data', (c) => { stdout += c })
    child.stderr.on('data', (c) => { stderr += c })
    child.on('error', reject)
    child.on('exit', (code) => {
      if (code === 0) resolve(stdout)
      else reject(new Error(`rill ${args.join(' ')} exited ${code}:\n${stderr}`))
    })
    // A command that reads no input may exit before its (empty) stdin is written and
    // closed: that EPIPE says nothing, and its exit code above decides.
    child.stdin.on('error', (e) => { if (e.code !== 'EPIPE') reject(e) })
    child.stdin.end(input === undefined ? '' : input)
  })
}

/** `rill … --output json`, parsed. */
export async function rillJson(server, args) {
  return JSON.parse(await rill(server, [...args, '--output', 'json']))
}

/** Starts a long-running `rill` command (a group member with --follow); resolves the
 * child process once it runs. Stop it with `stopProcess`. */
export function spawnRill(server, args) {
  checkBinary()
  const child = spawn(RILL_BIN, ['--server', server.url, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, RILL_LOG: 'warn' },
  })
  return child
}

export async function stopProcess(child) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const done = new Promise((r) => child.once('exit', r))
  child.kill('SIGTERM')
  await done
}
