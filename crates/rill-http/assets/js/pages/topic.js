// A topic: its totals and options, its traffic over the last minutes, its partitions
// (offsets, size, segments, failures, damaged ranges) with a link to browse each, an
// elastic topic's key ranges as a tree, its groups and named consumers, and the write
// actions the server takes.

import { ApiError, describeError, get, has, topicPath } from '../api.js'
import { rateCharts } from '../chart.js'
import { facts, h, replace, section, table } from '../dom.js'
import * as fmt from '../format.js'
import { alterTopic, deleteTopic, purgeTopic } from '../writes.js'
import { groupsSection } from './groups.js'

export function messagesHref(stream, topic, partition, offset) {
  const query = new URLSearchParams({ partition: String(partition) })
  if (offset !== undefined) query.set('offset', String(offset))
  return `#/topics/${encodeURIComponent(stream)}/${encodeURIComponent(topic)}/messages?${query}`
}

function optionFacts(o) {
  return facts([
    ['Partitions', fmt.count(o.partitions)],
    ['Retention time', o.retention_ms === null ? 'none' : fmt.millis(o.retention_ms)],
    ['Retention size', o.retention_bytes === null ? 'none' : `${fmt.bytes(o.retention_bytes)} per partition`],
    ['Segment size', o.segment_bytes === null ? 'the server\'s default' : fmt.bytes(o.segment_bytes)],
    ['Durability', o.durability],
    ['Largest record', o.max_record_bytes === null ? 'the server\'s default' : fmt.bytes(o.max_record_bytes)],
    ['Replicas', o.replicas === null ? 'not replicated' : fmt.count(o.replicas)],
  ])
}

function damagedList(ranges) {
  if (!ranges.length) return '—'
  return h('ul', { class: 'plain' }, ranges.map((r) => h('li', null,
    `${fmt.count(r.from_offset)}..${r.to_offset === null ? '?' : fmt.count(r.to_offset)} `,
    h('span', { class: r.accepted ? 'muted' : 'bad' }, r.accepted ? '(accepted)' : '(not accepted)'),
    h('br'),
    h('small', null, `${r.segment} at byte ${fmt.count(r.position)}: ${r.reason}`))))
}

function partitionsTable(d) {
  return table({
    key: 'partitions',
    caption: 'Partitions',
    columns: [['Partition', { numeric: true }], ['First offset', { numeric: true }], ['Next offset', { numeric: true }],
      ['Records', { numeric: true }], ['Size', { numeric: true }], ['Segments', { numeric: true }], 'Status', 'Damaged ranges', ''],
    rows: d.partitions.map((p) => ({
      attrs: { dataset: { partition: String(p.partition) } },
      cells: [
        String(p.partition),
        fmt.count(p.first_offset),
        fmt.count(p.next_offset),
        fmt.count(p.records),
        fmt.bytes(p.bytes),
        fmt.count(p.segments),
        p.failure ? h('span', { class: 'bad' }, `refuses appends: ${p.failure}`) : h('span', { class: 'good' }, 'ok'),
        damagedList(p.damaged),
        h('a', { href: messagesHref(d.stream, d.topic, p.partition) }, 'Browse'),
      ],
    })),
  })
}

/** How deep each range is in its lineage: an initial range 0, a child one more than its
 * deepest parent (parents have smaller ids). */
function depths(ranges) {
  const depth = new Map()
  for (const r of [...ranges].sort((a, b) => a.id - b.id)) {
    depth.set(r.id, r.parents.length ? 1 + Math.max(...r.parents.map((p) => depth.get(p) ?? 0)) : 0)
  }
  return depth
}

/** Indents `el` by `depth` steps (through the CSSOM: the console's CSP allows no style
 * attributes). */
function indented(el, depth) {
  el.style.paddingLeft = `${1.25 * depth}rem`
  return el
}

/** An elastic topic's key ranges, by id (a parent before its children), each indented
 * by its depth in the lineage and naming the ranges it came from. */
function rangesTable(d) {
  const depth = depths(d.ranges)
  const records = new Map(d.partitions.map((p) => [p.partition, p.records]))
  return table({
    key: 'ranges',
    caption: 'Key ranges',
    columns: ['Range', 'Hashes', 'State', 'From', ['Records', { numeric: true }], ['Write rate', { numeric: true }]],
    rows: [...d.ranges].sort((a, b) => a.id - b.id).map((r) => ({
      attrs: { dataset: { range: String(r.id), depth: String(depth.get(r.id)) } },
      cells: [
        indented(h('span', { class: 'range-id' }, depth.get(r.id) ? '└ ' : '', String(r.id)), depth.get(r.id)),
        h('code', null, `${r.lo}–${r.hi}`),
        r.sealed_at === null
          ? h('span', { class: 'good' }, 'open')
          : h('span', { class: 'muted' }, `sealed at ${fmt.count(r.sealed_at)}`),
        r.parents.length ? r.parents.join(', ') : '—',
        fmt.count(records.get(r.id) ?? 0),
        r.bytes_per_s === null ? '—' : fmt.byteRate(r.bytes_per_s),
      ],
    })),
  })
}

export function mount(ctx, [stream, topic]) {
  const full = `${stream}/${topic}`
  ctx.setPage(full, [[full]])
  const summary = h('div')
  const options = h('div')
  const partitions = h('div')
  const ranges = h('div')
  const rangesCard = section('Key ranges', { hidden: true }, ranges)
  const charts = h('div')
  const error = h('p', { class: 'error', role: 'alert', hidden: true })
  let described = null
  const groups = groupsSection(ctx, { scope: { stream, topic } })
  const actions = ctx.writes
    ? h('div', { class: 'tools' },
      has('PATCH', '/api/v1/streams/{stream}/topics/{topic}')
        ? h('button', {
          type: 'button',
          onclick: () => described && alterTopic({
            stream,
            topic,
            options: described.options,
            done: () => {
              ctx.notify(`Changed topic ${full}.`)
              ctx.refresh()
            },
          }),
        }, 'Change topic')
        : null,
      has('POST', '/api/v1/streams/{stream}/topics/{topic}/purge')
        ? h('button', {
          type: 'button',
          class: 'danger',
          onclick: () => described && purgeTopic({
            stream,
            topic,
            partitions: described.partitions.map((p) => p.partition),
            done: (starts) => {
              ctx.notify(`Purged ${full}: ${starts.map((s) => `partition ${s.partition} starts at ${fmt.count(s.first_offset)}`).join(', ')}.`)
              ctx.refresh()
            },
          }),
        }, 'Purge records')
        : null,
      h('button', {
        type: 'button',
        class: 'danger',
        onclick: () => deleteTopic({
          stream,
          topic,
          records: described ? fmt.count(described.totals.records) : undefined,
          done: () => {
            ctx.notify(`Deleted topic ${full}.`)
            location.hash = '#/'
          },
        }),
      }, 'Delete topic'))
    : null
  ctx.main.append(
    h('div', { class: 'page-head' },
      h('h1', { tabindex: '-1' }, h('span', { class: 'muted' }, `${stream}/`), topic),
      actions),
    error,
    summary,
    section('Traffic, last 5 minutes', null, charts),
    rangesCard,
    section('Partitions', null, partitions),
    h('div', { class: 'two-columns' }, groups.element, section('Options', null, options)))

  return {
    async refresh(alive) {
      let d
      let rates
      try {
        [d, rates] = await Promise.all([
          get(topicPath(stream, topic)),
          get('/api/v1/rates', { stream, topic }),
        ])
      } catch (e) {
        if (!alive() || (e instanceof ApiError && e.unreachable)) return
        error.textContent = e instanceof ApiError && e.code === 'TOPIC_NOT_FOUND'
          ? `There is no topic ${full}.`
          : describeError(e)
        error.hidden = false
        return
      }
      if (!alive()) return
      described = d
      error.hidden = true
      const r = d.rates
      replace(summary, h('ul', { class: 'stats' },
        h('li', null, h('span', null, 'Records'), h('strong', null, fmt.count(d.totals.records))),
        h('li', null, h('span', null, 'Size'), h('strong', null, fmt.bytes(d.totals.bytes))),
        h('li', null, h('span', null, 'Segments'), h('strong', null, fmt.count(d.totals.segments))),
        h('li', null, h('span', null, 'In'), h('strong', null, r ? fmt.rate(r.records_in_per_second) : '—')),
        h('li', null, h('span', null, 'Out'), h('strong', null, r ? fmt.rate(r.records_out_per_second) : '—')),
        h('li', null, h('span', null, 'Failed partitions'),
          h('strong', { class: d.totals.failed_partitions ? 'bad' : null }, fmt.count(d.totals.failed_partitions)))))
      replace(options, optionFacts(d.options))
      replace(partitions, partitionsTable(d))
      rangesCard.hidden = !d.elastic
      if (d.elastic) {
        replace(ranges, h('p', { class: 'muted' },
          `Epoch ${fmt.count(d.range_epoch)}: ${fmt.count(d.ranges.filter((r) => r.sealed_at === null).length)} open of ${fmt.count(d.ranges.length)}. `,
          'A keyed record goes to the open range covering its key\'s hash; readers finish a range before its children.'),
        rangesTable(d))
      }
      replace(charts, rateCharts(rates))
      await groups.refresh(alive, [{ stream, topic, partitions: d.partitions.map((p) => p.partition) }])
    },
  }
}
