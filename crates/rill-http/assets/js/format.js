// Numbers, sizes, rates, durations and times as the console writes them. Offsets and
// counts come as JSON numbers below 2^53 (docs/HTTP_API.md §2), exact in JavaScript.

const integer = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 })
const decimal = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 })
const fine = new Intl.NumberFormat('en-US', { maximumFractionDigits: 2 })

/** `1234567` → `1,234,567`. */
export function count(n) {
  if (n === null || n === undefined) return '—'
  return integer.format(n)
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB']

/** `1536` → `1.5 KiB`. */
export function bytes(n) {
  if (n === null || n === undefined) return '—'
  let value = Number(n)
  let unit = 0
  while (Math.abs(value) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024
    unit += 1
  }
  return unit === 0 ? `${integer.format(value)} B` : `${decimal.format(value)} ${UNITS[unit]}`
}

/** A rate per second: `12.5/s`, `1.2k/s`. */
export function rate(n) {
  if (n === null || n === undefined) return '—'
  return `${short(n)}/s`
}

/** A bytes-per-second rate: `1.5 KiB/s`. */
export function byteRate(n) {
  if (n === null || n === undefined) return '—'
  return `${bytes(n)}/s`
}

/** A compact number: `950`, `12.5`, `1.2k`, `3.4M`. */
export function short(n) {
  const value = Number(n)
  const abs = Math.abs(value)
  if (abs >= 1e9) return `${decimal.format(value / 1e9)}G`
  if (abs >= 1e6) return `${decimal.format(value / 1e6)}M`
  if (abs >= 1e4) return `${decimal.format(value / 1e3)}k`
  if (abs >= 100 || Number.isInteger(value)) return integer.format(value)
  if (abs < 1) return fine.format(value)
  return decimal.format(value)
}

/** `3725` s → `1 h 2 min`. */
export function duration(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds)))
  if (s < 60) return `${s} s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m} min ${s % 60} s`
  const hours = Math.floor(m / 60)
  if (hours < 48) return `${hours} h ${m % 60} min`
  return `${Math.floor(hours / 24)} d ${hours % 24} h`
}

/** Milliseconds as the largest whole unit: `604800000` → `7 d`. */
export function millis(ms) {
  if (ms === null || ms === undefined) return 'none'
  const units = [[86_400_000, 'd'], [3_600_000, 'h'], [60_000, 'min'], [1000, 's']]
  for (const [size, name] of units) {
    if (ms >= size && ms % size === 0) return `${count(ms / size)} ${name}`
  }
  return `${count(ms)} ms`
}

function pad(n, width = 2) {
  return String(n).padStart(width, '0')
}

/** An RFC 3339 time of the API in the browser's time zone, to the millisecond:
 * `2026-01-02 03:04:05.123`. */
export function time(rfc3339) {
  if (!rfc3339) return '—'
  const d = new Date(rfc3339)
  if (Number.isNaN(d.getTime())) return rfc3339
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(d)}.${pad(d.getMilliseconds(), 3)}`
}

/** `HH:MM:SS` of a date in the browser's time zone. */
export function clock(d) {
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
}

/** The value of a `datetime-local` input for a date (local time, to the second). */
export function localInput(d) {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${clock(d)}`
}
