// A consumer group of a topic: its members and what each owns, every partition's
// owner, stored offset, end and lag, and its lag over time: the total from the
// server's sampler (the last 15 minutes) and, per partition, what this console saw on
// each refresh since the page was first opened (the API keeps no per-partition history).

import { ApiError, describeError, get, has, topicPath } from '../api.js'
import { PALETTE, lineChart } from '../chart.js'
import { h, replace, section, table } from '../dom.js'
import * as fmt from '../format.js'
import { deleteGroup, resetOffsets } from '../writes.js'
import { messagesHref } from './topic.js'

/** Samples kept per partition: 15 minutes at the refresh interval. */
const SAMPLES_MAX = 180
/** Partitions drawn in the per-partition chart at most (the largest lags). */
const LINES_MAX = PALETTE.length

/** Per group (`stream/topic/group`): partition → `[[timeMs, lag], …]`, kept while
 * the console is open, so coming back to a group keeps what was seen. */
const seen = new Map()

function remember(key, partitions) {
  if (!seen.has(key)) seen.set(key, new Map())
  const byPartition = seen.get(key)
  const now = Date.now()
  for (const p of partitions) {
    if (!byPartition.has(p.partition)) byPartition.set(p.partition, [])
    const points = byPartition.get(p.partition)
    points.push([now, p.lag])
    if (points.length > SAMPLES_MAX) points.splice(0, points.length - SAMPLES_MAX)
  }
  return byPartition
}

function reportsText(reports) {
  const entries = Object.entries(reports || {})
  return entries.length ? entries.map(([k, v]) => `${k} ${fmt.count(v)}`).join(', ') : '—'
}

export function mount(ctx, [stream, topic, groupName]) {
  const full = `${stream}/${topic}`
  const topicHref = `#/topics/${encodeURIComponent(stream)}/${encodeURIComponent(topic)}`
  ctx.setPage(`${groupName} on ${full}`, [[full, topicHref], [`Group ${groupName}`]])
  const summary = h('div')
  const members = h('div')
  const partitions = h('div')
  const totalChart = h('div')
  const partitionChart = h('div')
  const error = h('p', { class: 'error', role: 'alert', hidden: true })
  let last = null
  const groupPath = '/api/v1/streams/{stream}/topics/{topic}/groups/{group}'
  const actions = ctx.writes
    ? h('div', { class: 'tools' },
      has('POST', `${groupPath}/reset`)
        ? h('button', {
          type: 'button',
          onclick: () => last && resetOffsets({
            kind: 'group',
            stream,
            topic,
            name: groupName,
            partitions: last.partitions.map((p) => p.partition),
            members: last.members.length,
            done: (offsets) => {
              ctx.notify(`Reset group ${groupName}: ${offsets.map((o) => `partition ${o.partition} at ${o.offset === null ? 'none' : fmt.count(o.offset)}`).join(', ')}.`)
              ctx.refresh()
            },
          }),
        }, 'Reset offsets')
        : null,
      has('DELETE', groupPath)
        ? h('button', {
          type: 'button',
          class: 'danger',
          onclick: () => deleteGroup({
            stream,
            topic,
            group: groupName,
            done: () => {
              ctx.notify(`Deleted group ${groupName} of ${full}.`)
              location.hash = topicHref
            },
          }),
        }, 'Delete group')
        : null)
    : null
  ctx.main.append(
    h('div', { class: 'page-head' },
      h('h1', { tabindex: '-1' }, h('span', { class: 'muted' }, 'Group '), groupName, h('span', { class: 'muted' }, ` on ${full}`)),
      actions),
    error,
    summary,
    section('Members', null, members),
    section('Partitions', null, partitions),
    h('div', { class: 'two-columns' },
      section('Lag, last 15 minutes', null, totalChart),
      section('Lag per partition, since this page was opened', null, partitionChart)))

  return {
    async refresh(alive) {
      let g
      try {
        g = await get(`${topicPath(stream, topic)}/groups/${encodeURIComponent(groupName)}`)
      } catch (e) {
        if (!alive() || (e instanceof ApiError && e.unreachable)) return
        error.textContent = e instanceof ApiError && e.code === 'GROUP_NOT_FOUND'
          ? `The group ${groupName} has neither members nor stored offsets on ${full}.`
          : describeError(e)
        error.hidden = false
        return
      }
      if (!alive()) return
      last = g
      error.hidden = true
      replace(summary, h('ul', { class: 'stats' },
        h('li', null, h('span', null, 'Total lag (records)'), h('strong', { id: 'group-lag' }, fmt.count(g.lag))),
        h('li', null, h('span', null, 'Members'), h('strong', null, fmt.count(g.members.length))),
        h('li', null, h('span', null, 'Partitions'), h('strong', null, fmt.count(g.partitions.length))),
        h('li', null, h('span', null, 'Generation'), h('strong', null, String(g.generation)))))
      replace(members, table({
        key: 'members',
        caption: 'Members',
        empty: 'No live members: the group is known by its stored offsets.',
        columns: ['Member', 'Owns partitions', 'Giving up', 'Reports'],
        rows: g.members.map((m) => ({
          attrs: { dataset: { member: m.member_id } },
          cells: [m.member_id, m.owned.join(', ') || '—', m.revoke.join(', ') || '—', reportsText(m.reports)],
        })),
      }))
      const maxLag = Math.max(1, ...g.partitions.map((p) => p.lag))
      replace(partitions, table({
        key: 'group-partitions',
        caption: 'Partitions',
        columns: [['Partition', { numeric: true }], 'Owner', ['Stored offset', { numeric: true }], ['Log end', { numeric: true }],
          ['Lag', { numeric: true }], 'Lag share', ''],
        rows: g.partitions.map((p) => {
          const bar = h('span', { class: 'bar' }, h('span', { class: 'bar-fill' }))
          bar.firstChild.style.width = `${(100 * p.lag) / maxLag}%`
          return {
            attrs: { dataset: { partition: String(p.partition) } },
            cells: [
              String(p.partition),
              p.owner || h('span', { class: 'muted' }, 'unassigned'),
              p.stored_offset === null ? h('span', { class: 'muted' }, 'none') : fmt.count(p.stored_offset),
              fmt.count(p.log_end),
              h('span', { class: 'lag' }, fmt.count(p.lag)),
              bar,
              p.stored_offset === null
                ? ''
                : h('a', { href: messagesHref(stream, topic, p.partition, p.stored_offset) }, 'Browse from stored offset'),
            ],
          }
        }),
      }))
      const interval = g.lag_history.interval_seconds
      replace(totalChart, lineChart({
        label: 'Total lag',
        format: fmt.short,
        gapMs: interval * 2500,
        whole: true,
        empty: `No samples yet: the server samples lag every ${interval} s.`,
        series: [{ name: 'total lag', color: PALETTE[0], points: g.lag_history.points.filter((p) => p.at).map((p) => [new Date(p.at).getTime(), p.lag]) }],
      }))
      const history = remember(`${stream}/${topic}/${groupName}`, g.partitions)
      const drawn = [...history.entries()]
        .sort((a, b) => b[1][b[1].length - 1][1] - a[1][a[1].length - 1][1] || a[0] - b[0])
        .slice(0, LINES_MAX)
        .sort((a, b) => a[0] - b[0])
      replace(partitionChart,
        lineChart({
          label: 'Lag per partition',
          format: fmt.short,
          gapMs: 30_000,
          whole: true,
          series: drawn.map(([partition, points], i) => ({ name: `partition ${partition}`, color: PALETTE[i % PALETTE.length], points })),
        }),
        history.size > LINES_MAX
          ? h('p', { class: 'muted' }, `The ${LINES_MAX} partitions with the largest lag of ${history.size}.`)
          : null,
        drawn.every(([, points]) => points.length === 1)
          ? h('p', { class: 'muted' }, 'One sample so far: the lines grow with each refresh, every 5 s.')
          : null)
    },
  }
}
