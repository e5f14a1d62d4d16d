// The message browser: one partition's records a page at a time, from an offset, a
// time, the first record or the latest ones, paged forwards and backwards.
//
// Where the browser is lives in the address (`…/messages?partition=0&offset=40`), so
// the back button steps back through the pages seen and a page can be bookmarked.
// `from=latest` follows the partition's end: each refresh shows its last records.
// A refresh re-renders the records only when the page's offsets changed, so what is
// open or being read stays as it is.

import { ApiError, describeError, get, topicPath } from '../api.js'
import { h, replace } from '../dom.js'
import * as fmt from '../format.js'
import { recordElement } from '../record.js'

const LIMITS = [20, 50, 100]

/** Where a page starts, from the address's query. */
function parseQuery(query) {
  const partition = Number.parseInt(query.get('partition') || '0', 10)
  const limit = Number.parseInt(query.get('limit') || '20', 10)
  const where = { partition: Number.isSafeInteger(partition) && partition >= 0 ? partition : 0, limit: LIMITS.includes(limit) ? limit : 20 }
  if (query.has('offset') && /^\d+$/.test(query.get('offset'))) return { ...where, offset: Number(query.get('offset')) }
  if (query.has('time')) return { ...where, time: query.get('time') }
  if (query.get('from') === 'latest') return { ...where, latest: true }
  return { ...where, first: true }
}

export function mount(ctx, [stream, topic], initialQuery) {
  const full = `${stream}/${topic}`
  const topicHref = `#/topics/${encodeURIComponent(stream)}/${encodeURIComponent(topic)}`
  ctx.setPage(`Messages of ${full}`, [[full, topicHref], ['Messages']])
  const hrefFor = (q) => {
    const query = new URLSearchParams({ partition: String(q.partition) })
    if (q.offset !== undefined) query.set('offset', String(q.offset))
    else if (q.time) query.set('time', q.time)
    else if (q.latest) query.set('from', 'latest')
    if (q.limit !== 20) query.set('limit', String(q.limit))
    return `${topicHref}/messages?${query}`
  }

  let where = null
  let described = null
  let page = null
  let shownOffsets = ''
  const states = new Map()
  const stateOf = (offset) => {
    if (!states.has(offset)) states.set(offset, { open: false, view: 'json', full: false })
    return states.get(offset)
  }

  // The form: partition, where to start, page size.
  const partition = h('select', { id: 'm-partition' })
  const mode = h('select', { id: 'm-mode', 'aria-label': 'Start at' },
    h('option', { value: 'offset' }, 'offset'),
    h('option', { value: 'time' }, 'time'),
    h('option', { value: 'first' }, 'the first record'),
    h('option', { value: 'latest' }, 'the latest records (follows new ones)'))
  const offset = h('input', { id: 'm-offset', type: 'number', min: '0', step: '1', inputmode: 'numeric', 'aria-label': 'Offset' })
  const time = h('input', { id: 'm-time', type: 'datetime-local', step: '1', 'aria-label': 'Time (this browser\'s time zone)' })
  const limit = h('select', { id: 'm-limit' }, LIMITS.map((n) => h('option', { value: String(n) }, String(n))))
  const syncMode = () => {
    offset.hidden = mode.value !== 'offset'
    time.hidden = mode.value !== 'time'
  }
  mode.addEventListener('change', syncMode)
  const form = h('form', { class: 'browser-form', 'aria-label': 'Where to read' },
    h('label', { for: 'm-partition' }, 'Partition'), partition,
    h('label', { for: 'm-mode' }, 'Start at'), mode, offset, time,
    h('label', { for: 'm-limit' }, 'Records per page'), limit,
    h('button', { type: 'submit', class: 'primary' }, 'Show'))
  form.addEventListener('submit', (event) => {
    event.preventDefault()
    const q = { partition: Number(partition.value), limit: Number(limit.value) }
    if (mode.value === 'offset') {
      if (!/^\d+$/.test(offset.value)) {
        offset.setCustomValidity('Enter an offset: a whole number from 0.')
        offset.reportValidity()
        return
      }
      q.offset = Number(offset.value)
    } else if (mode.value === 'time') {
      const d = new Date(time.value)
      if (!time.value || Number.isNaN(d.getTime())) {
        time.setCustomValidity('Enter a date and time.')
        time.reportValidity()
        return
      }
      q.time = d.toISOString()
    } else if (mode.value === 'latest') {
      q.latest = true
    }
    location.hash = hrefFor(q)
  })
  offset.addEventListener('input', () => offset.setCustomValidity(''))
  time.addEventListener('input', () => time.setCustomValidity(''))

  const range = h('p', { class: 'range', 'aria-live': 'polite' })
  const error = h('p', { class: 'error', role: 'alert', hidden: true })
  const loss = h('p', { class: 'warn', role: 'status', hidden: true })
  const list = h('div', { class: 'records', 'aria-label': 'Records' })
  const older = h('a', { class: 'button', rel: 'prev' }, '← Older')
  const newer = h('a', { class: 'button', rel: 'next' }, 'Newer →')
  const latest = h('a', { class: 'button' }, 'Latest')
  const expand = h('button', { type: 'button', onclick: () => setAllOpen(true) }, 'Expand all')
  const collapse = h('button', { type: 'button', onclick: () => setAllOpen(false) }, 'Collapse all')
  const pager = () => h('nav', { class: 'pager', 'aria-label': 'Pages' }, older, newer, latest, expand, collapse)
  const columns = h('div', { class: 'records-head', 'aria-hidden': 'true' },
    h('span', null, 'Offset'), h('span', null, 'Time'), h('span', null, 'Key'), h('span', null, 'Headers'), h('span', null, 'Value'))

  function setAllOpen(open) {
    for (const details of list.querySelectorAll('details.record')) details.open = open
  }

  ctx.main.append(
    h('h1', { tabindex: '-1' }, 'Messages of ', h('span', null, full)),
    h('section', { class: 'card' }, form, range),
    error, loss,
    h('section', { class: 'card' }, pager(), columns, list))

  function applyWhere(q) {
    where = q
    partition.value = String(q.partition)
    limit.value = String(q.limit)
    mode.value = q.offset !== undefined ? 'offset' : q.time ? 'time' : q.latest ? 'latest' : 'first'
    if (q.offset !== undefined) offset.value = String(q.offset)
    if (q.time) time.value = fmt.localInput(new Date(q.time))
    syncMode()
  }

  function renderPartitions() {
    const count = described.partitions.length
    if (partition.options.length === count) return
    replace(partition, described.partitions.map((p) => h('option', { value: String(p.partition) }, String(p.partition))))
    partition.value = String(where.partition)
  }

  function renderPager(p, info) {
    const first = p.records.length ? p.records[0].offset : p.from
    const start = info ? info.first_offset : 0
    const end = info ? info.next_offset : 0
    const olderAt = Math.max(start, first - where.limit)
    older.href = hrefFor({ partition: where.partition, limit: where.limit, offset: olderAt })
    const olderOff = first <= start
    older.toggleAttribute('aria-disabled', olderOff)
    older.classList.toggle('disabled', olderOff)
    newer.href = hrefFor({ partition: where.partition, limit: where.limit, offset: p.next_offset })
    const newerOff = p.next_offset >= end
    newer.toggleAttribute('aria-disabled', newerOff)
    newer.classList.toggle('disabled', newerOff)
    latest.href = hrefFor({ partition: where.partition, limit: where.limit, latest: true })
  }

  async function refresh(alive) {
    let d
    try {
      d = await get(topicPath(stream, topic))
    } catch (e) {
      if (!alive()) return
      return showError(e)
    }
    if (!alive()) return
    described = d
    renderPartitions()
    const info = d.partitions.find((p) => p.partition === where.partition)
    if (!info) {
      return showError(new ApiError(404, 'PARTITION_NOT_FOUND', `${full} has no partition ${where.partition} (it has ${d.partitions.length})`))
    }
    range.textContent = info.next_offset > info.first_offset
      ? `Partition ${info.partition} holds offsets ${fmt.count(info.first_offset)} to ${fmt.count(info.next_offset - 1)} (${fmt.count(info.records)} records).`
      : `Partition ${info.partition} holds no records (its next offset is ${fmt.count(info.next_offset)}).`
    const query = { limit: where.limit }
    if (where.offset !== undefined) query.offset = where.offset
    else if (where.time) query.time = where.time
    else if (where.latest) query.offset = Math.max(info.first_offset, info.next_offset - where.limit)
    else query.offset = info.first_offset
    let p
    try {
      p = await get(`${topicPath(stream, topic)}/partitions/${where.partition}/messages`, query)
    } catch (e) {
      if (!alive()) return
      return showError(e, info)
    }
    if (!alive()) return
    error.hidden = true
    p.from = query.offset !== undefined ? query.offset : p.next_offset
    page = p
    renderPager(p, info)
    if (p.data_loss) {
      loss.textContent = `Records ${fmt.count(p.data_loss.from_offset)} to ${fmt.count(p.data_loss.to_offset - 1)} cannot be read (damaged: ${p.data_loss.reason}). Reading goes on at ${fmt.count(p.data_loss.to_offset)}: use “Newer”.`
      loss.hidden = false
    } else {
      loss.hidden = true
    }
    const offsets = p.records.map((r) => r.offset).join(',')
    if (offsets === shownOffsets && list.childElementCount) return
    shownOffsets = offsets
    if (p.records.length === 0) {
      replace(list, h('p', { class: 'empty' }, where.time
        ? 'No record at or after this time.'
        : 'No records here yet.'))
      return
    }
    replace(list, p.records.map((r) => recordElement(r, stateOf(r.offset))))
  }

  function showError(e, info) {
    if (e instanceof ApiError && e.unreachable) return
    let text = describeError(e)
    if (e instanceof ApiError && (e.code === 'OFFSET_BEFORE_START' || e.code === 'OFFSET_BEYOND_END') && info) {
      text += ` The partition holds offsets ${fmt.count(info.first_offset)} to ${fmt.count(Math.max(info.first_offset, info.next_offset - 1))}.`
    }
    error.textContent = text
    error.hidden = false
    replace(list)
    shownOffsets = ''
    page = null
  }

  for (const link of [older, newer]) {
    link.addEventListener('click', (event) => {
      if (link.classList.contains('disabled')) event.preventDefault()
    })
  }
  applyWhere(parseQuery(initialQuery))
  return {
    /** Takes a new address of this page (paging) without building the page again. */
    update(query) {
      applyWhere(parseQuery(query))
      shownOffsets = ''
      return ctx.refresh()
    },
    refresh,
  }
}
