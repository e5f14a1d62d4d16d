// Small SVG line charts, made by hand: time on the x axis, one or more series of
// numbers on the y axis from zero, a legend that shows the latest values (or the values
// under the pointer), and a text alternative. No library and nothing fetched.

import { h, svg } from './dom.js'
import { byteRate, clock, rate } from './format.js'

/** Colours for series, each with a contrast of at least 3:1 against the chart's
 * white background (WCAG's bound for graphics). */
export const PALETTE = ['#1a56db', '#c2410c', '#047857', '#7e22ce', '#b91c1c', '#0e7490', '#a16207', '#be185d', '#4d7c0f', '#4338ca']

const WIDTH = 600
const PAD = { left: 56, right: 14, top: 12, bottom: 24 }

/** The y axis's top: four times the smallest of 1, 2, 2.5, 5 × 10^k that makes four
 * steps reach `value` (a whole step at least for whole numbers, so a lag axis never
 * reads 0.25 records). */
function niceTop(value, whole) {
  const v = Math.max(value, whole ? 4 : 1) / 4
  const power = 10 ** Math.floor(Math.log10(v) + 1e-9)
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * power >= v && (!whole || Number.isInteger(step * power))) return 4 * step * power
  }
  return 40 * power
}

/** As `niceTop`, for byte counts: steps of 1, 2, 2.5 or 5 of the largest binary unit
 * (KiB, MiB, …) below the value, so the axis reads 2 KiB rather than 1.9 KiB. */
function niceTopBytes(value) {
  const unit = 1024 ** Math.max(0, Math.floor(Math.log(Math.max(value, 1)) / Math.log(1024)))
  return niceTop(value / unit, unit === 1) * unit
}

const TIME_STEPS = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600].map((s) => s * 1000)

/**
 * A chart element.
 * - `label`: what it shows, for the text alternative (`Records per second`).
 * - `series`: `[{name, color, points: [[timeMs, value], …]}]`, oldest first.
 * - `format`: a y value as text.
 * - `gapMs`: points further apart than this are not joined (a pause in sampling).
 * - `empty`: the words shown when no series has a point.
 * - `whole`: the values are whole numbers (counts), so are the axis's steps.
 * - `bytes`: the values are bytes: the axis steps by binary units.
 */
export function lineChart({ label, series, format = String, gapMs = Infinity, height = 180, empty = 'No samples yet.', whole = false, bytes = false }) {
  const all = series.flatMap((s) => s.points)
  const legend = h('ul', { class: 'legend' })
  const figure = h('figure', { class: 'chart' })
  if (all.length === 0) {
    figure.append(h('p', { class: 'chart-empty' }, empty))
    return figure
  }
  const t0 = Math.min(...all.map((p) => p[0]))
  const t1 = Math.max(t0 + 1000, ...all.map((p) => p[0]))
  const top = Math.max(...all.map((p) => p[1]))
  const yMax = bytes ? niceTopBytes(top) : niceTop(top, whole)
  const plotW = WIDTH - PAD.left - PAD.right
  const plotH = height - PAD.top - PAD.bottom
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * plotW
  const y = (v) => PAD.top + plotH - (v / yMax) * plotH

  const grid = []
  for (let i = 0; i <= 4; i += 1) {
    const v = (yMax * i) / 4
    grid.push(svg('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v), class: i === 0 ? 'axis' : 'grid' }))
    grid.push(svg('text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, format(v)))
  }
  const step = TIME_STEPS.find((s) => (t1 - t0) / s <= 5) || TIME_STEPS[TIME_STEPS.length - 1]
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    grid.push(svg('line', { x1: x(t), x2: x(t), y1: PAD.top + plotH, y2: PAD.top + plotH + 4, class: 'axis' }))
    const d = new Date(t)
    const text = step >= 60_000 ? clock(d).slice(0, 5) : clock(d)
    // A label at either end of the axis is anchored inside the chart, not cut.
    const anchor = x(t) > WIDTH - PAD.right - 30 ? 'end' : x(t) < PAD.left + 30 ? 'start' : 'middle'
    grid.push(svg('text', { x: x(t), y: height - 6, 'text-anchor': anchor, class: 'tick' }, text))
  }

  const lines = series.map((s) => {
    let d = ''
    let previous = null
    for (const [t, v] of s.points) {
      d += `${previous === null || t - previous > gapMs ? 'M' : 'L'}${x(t).toFixed(1)} ${y(v).toFixed(1)} `
      previous = t
    }
    // A single point is drawn as a dot: a path of one move draws nothing.
    const dot = s.points.length === 1
      ? svg('circle', { cx: x(s.points[0][0]), cy: y(s.points[0][1]), r: 3, fill: s.color })
      : null
    return [svg('path', { d: d.trim(), fill: 'none', stroke: s.color, 'stroke-width': 2, 'stroke-linejoin': 'round', class: 'series' }), dot]
  })

  const cursor = svg('line', { y1: PAD.top, y2: PAD.top + plotH, class: 'cursor', visibility: 'hidden' })
  const overlay = svg('rect', { x: PAD.left, y: PAD.top, width: plotW, height: plotH, fill: 'transparent' })
  const readout = h('p', { class: 'readout', 'aria-live': 'off' })
  const latest = series.map((s) => (s.points.length ? s.points[s.points.length - 1][1] : null))

  const showLegend = (values, at) => {
    legend.replaceChildren(...series.map((s, i) => h('li', null,
      h('span', { class: 'swatch', dataset: { color: s.color } }),
      `${s.name} `,
      h('strong', null, values[i] === null ? '—' : format(values[i])))))
    for (const sw of legend.querySelectorAll('.swatch')) sw.style.backgroundColor = sw.dataset.color
    readout.textContent = at === null ? '' : `at ${clock(new Date(at))}`
  }
  showLegend(latest, null)

  overlay.addEventListener('pointermove', (event) => {
    const box = overlay.getBoundingClientRect()
    const t = t0 + ((event.clientX - box.left) / box.width) * (t1 - t0)
    const values = series.map((s) => {
      let best = null
      for (const p of s.points) if (best === null || Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p
      return best
    })
    const at = values.find(Boolean)
    if (!at) return
    cursor.setAttribute('x1', x(at[0]))
    cursor.setAttribute('x2', x(at[0]))
    cursor.setAttribute('visibility', 'visible')
    showLegend(values.map((p) => (p ? p[1] : null)), at[0])
  })
  overlay.addEventListener('pointerleave', () => {
    cursor.setAttribute('visibility', 'hidden')
    showLegend(latest, null)
  })

  const summary = series.map((s, i) => `${s.name} ${latest[i] === null ? 'none' : format(latest[i])}`).join(', ')
  const from = clock(new Date(t0))
  const to = clock(new Date(t1))
  figure.append(
    svg('svg', { viewBox: `0 0 ${WIDTH} ${height}`, role: 'img', 'aria-label': `${label} from ${from} to ${to}; latest: ${summary}` },
      grid, lines, cursor, overlay),
    h('figcaption', null, legend, readout))
  return figure
}

/** The two charts of a rates answer (`GET /api/v1/rates`): records and bytes per
 * second, in and out. */
export function rateCharts(rates) {
  const at = (p) => new Date(p.at).getTime()
  const points = (rates.points || []).filter((p) => p.at)
  const gapMs = rates.interval_seconds * 1000 * 2.5
  const empty = `No samples yet: the server samples traffic every ${rates.interval_seconds} s, and the first rates come with its second sample.`
  const series = (key) => points.map((p) => [at(p), p[key]])
  return h('div', { class: 'charts' },
    h('div', null, h('h3', null, 'Records per second'),
      lineChart({
        label: 'Records per second in and out',
        format: (v) => rate(v).replace('/s', ''),
        gapMs,
        empty,
        series: [
          { name: 'in', color: PALETTE[0], points: series('records_in_per_second') },
          { name: 'out', color: PALETTE[1], points: series('records_out_per_second') },
        ],
      })),
    h('div', null, h('h3', null, 'Bytes per second'),
      lineChart({
        label: 'Bytes per second in and out',
        format: (v) => byteRate(v).replace('/s', ''),
        bytes: true,
        gapMs,
        empty,
        series: [
          { name: 'in', color: PALETTE[0], points: series('bytes_in_per_second') },
          { name: 'out', color: PALETTE[1], points: series('bytes_out_per_second') },
        ],
      })))
}
