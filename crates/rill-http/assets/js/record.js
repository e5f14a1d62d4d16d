// One record of the message browser: a one-line summary (offset, time, key, headers,
// the value's start) that opens into its details: the time in UTC, the key, every
// header with its type, and the value as pretty-printed JSON, text or a hex dump.
// Everything from the record is put into text nodes (never parsed as markup), and a
// long value is shown cut, with a button for the rest.

import { bytesOf, hexDump, hexString } from './bytes.js'
import { facts, h, table } from './dom.js'
import * as fmt from './format.js'
import { prettyJson, renderJson } from './json.js'

/** Characters of JSON or text shown before "Show all". */
const TEXT_SHOWN = 4000
/** Bytes of a hex dump shown before "Show all". */
const HEX_SHOWN = 1024
/** Characters of the one-line preview. */
const PREVIEW = 200

/** The views a value has: JSON when the server parsed it, text when it is UTF-8, and
 * always hex. */
export function views(value) {
  const out = []
  if (value.json !== undefined) out.push('json')
  if (typeof value.text === 'string') out.push('text')
  out.push('hex')
  return out
}

function keyText(key) {
  if (!key) return h('span', { class: 'muted' }, 'no key')
  if (typeof key.text === 'string') return key.text
  return h('span', { title: 'the key is not UTF-8: its bytes in hex' }, `0x${hexString(bytesOf(key)).slice(0, 64)}`)
}

function preview(value) {
  if (typeof value.text === 'string') return value.text.slice(0, PREVIEW).replace(/\s+/g, ' ')
  return `0x${hexString(bytesOf(value).subarray(0, PREVIEW / 2))}`
}

/** The value in one view, cut unless `full`. Resolves `{nodes, cut}`. */
function valueContent(value, view, full) {
  if (view === 'json') {
    const { nodes, shown, total } = renderJson(prettyJson(value.text), full ? Infinity : TEXT_SHOWN)
    return { nodes, cut: shown < total }
  }
  if (view === 'text') {
    const text = value.text
    return { nodes: [full ? text : text.slice(0, TEXT_SHOWN)], cut: !full && text.length > TEXT_SHOWN }
  }
  const bytes = bytesOf(value)
  return { nodes: [hexDump(bytes, full ? Infinity : HEX_SHOWN)], cut: !full && bytes.length > HEX_SHOWN }
}

const VIEW_NAMES = { json: 'JSON', text: 'Text', hex: 'Hex' }

/** The value viewer: a view switch, the content, "Show all" when cut. `state` holds
 * the chosen view and whether it is shown whole, and outlives re-renders. */
function valueViewer(value, state) {
  const available = views(value)
  if (!available.includes(state.view)) state.view = available[0]
  const content = h('pre', { class: 'value', tabindex: '0' })
  const more = h('button', { type: 'button', class: 'link-button' })
  const switcher = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Show the value as' })
  const render = () => {
    const { nodes, cut } = valueContent(value, state.view, state.full)
    content.replaceChildren(...nodes)
    content.dataset.view = state.view
    more.hidden = !cut
    more.textContent = `Show all ${state.view === 'hex' ? `${fmt.count(bytesOf(value).length)} bytes` : 'of it'}`
    for (const button of switcher.children) button.setAttribute('aria-pressed', String(button.dataset.view === state.view))
  }
  for (const view of ['json', 'text', 'hex']) {
    switcher.append(h('button', {
      type: 'button',
      dataset: { view },
      disabled: !available.includes(view),
      title: available.includes(view) ? null : `the value is not ${view === 'json' ? 'a JSON document' : 'UTF-8 text'}`,
      onclick: () => {
        state.view = view
        render()
      },
    }, VIEW_NAMES[view]))
  }
  more.addEventListener('click', () => {
    state.full = true
    render()
  })
  render()
  const cutByServer = value.truncated
    ? h('p', { class: 'warn' }, `The value has ${fmt.bytes(value.bytes)}; the server shows its first ${fmt.bytes(bytesOf(value).length)}.`)
    : null
  return h('div', { class: 'value-viewer' },
    h('div', { class: 'value-head' }, h('h4', null, `Value (${fmt.bytes(value.bytes)})`), switcher),
    cutByServer, content, more)
}

function headersTable(headers, offset) {
  return table({
    key: `headers-${offset}`,
    caption: `Headers of record ${offset}`,
    empty: 'No headers.',
    columns: ['Name', 'Type', 'Value'],
    rows: headers.map((hd) => [hd.name, hd.type, String(hd.value)]),
  })
}

/**
 * The element of one record. `state` (per offset, kept by the page) remembers whether
 * it is open and how its value is shown.
 */
export function recordElement(record, state) {
  const key = record.key
  const summary = h('summary', null,
    h('span', { class: 'r-offset' }, fmt.count(record.offset)),
    h('span', { class: 'r-time', title: record.timestamp || '' }, fmt.time(record.timestamp)),
    h('span', { class: 'r-key' }, keyText(key)),
    h('span', { class: 'r-headers' }, record.headers.length ? `${record.headers.length} header${record.headers.length === 1 ? '' : 's'}` : ''),
    h('span', { class: 'r-value' }, preview(record.value)))
  const details = h('details', { class: 'record', open: state.open, dataset: { offset: String(record.offset) } }, summary)
  let built = false
  const build = () => {
    if (built) return
    built = true
    details.append(h('div', { class: 'record-body' },
      facts([
        ['Offset', fmt.count(record.offset)],
        ['Time', `${fmt.time(record.timestamp)} (${record.timestamp || 'none'}, ${record.timestamp_us} µs)`],
        ['Key', key
          ? [keyText(key), h('span', { class: 'muted' }, ` (${fmt.bytes(key.bytes)}${typeof key.text === 'string' ? '' : ', not UTF-8'}${key.truncated ? ', cut by the server' : ''})`)]
          : keyText(null)],
      ]),
      h('h4', null, 'Headers'),
      headersTable(record.headers, record.offset),
      valueViewer(record.value, state)))
  }
  // The details are built when first opened: a page of 100 large records costs
  // nothing until one is looked at.
  if (state.open) build()
  details.addEventListener('toggle', () => {
    state.open = details.open
    if (details.open) build()
  })
  return details
}
