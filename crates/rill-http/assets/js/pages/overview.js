// The overview: the server's facts, its throughput over the last minutes, every topic
// with its totals and rates, and the consumer groups with their lag.

import { ApiError, describeError, get } from '../api.js'
import { rateCharts } from '../chart.js'
import { facts, h, link, replace, section, table } from '../dom.js'
import * as fmt from '../format.js'
import { createTopic } from '../writes.js'
import { groupsSection } from './groups.js'

/** Topics listed at most (pages of the API's largest size). */
const TOPICS_MAX = 5000

/** Every topic the caller may list, page after page (docs/HTTP_API.md §4). */
export async function allTopics() {
  const topics = []
  let after
  do {
    const page = await get('/api/v1/topics', { limit: 1000, after })
    topics.push(...page.topics)
    after = page.next
  } while (after && topics.length < TOPICS_MAX)
  return { topics, more: Boolean(after) }
}

export function topicHref(stream, topic) {
  return `#/topics/${encodeURIComponent(stream)}/${encodeURIComponent(topic)}`
}

function serverFacts(info) {
  const cluster = info.cluster
  return facts([
    ['Version', info.version],
    ['Uptime', `${fmt.duration(info.uptime_seconds)} (since ${fmt.time(info.started_at)})`],
    ['Authentication', info.auth ? 'required (--auth)' : 'off: every client acts as the same anonymous user'],
    info.auth ? ['Signed in as', info.user || 'unknown'] : null,
    ['TLS', info.tls ? 'on, on both ports' : 'off'],
    ['Writes over HTTP', info.admin_writes ? 'enabled (--http-admin-writes)' : 'disabled: start rill serve with --http-admin-writes to change topics and groups here'],
    ['Client port', info.listen.client],
    ['HTTP port', info.listen.http || '—'],
    ['Cluster', cluster
      ? `node ${cluster.node_id}, ${cluster.role}${cluster.controller === null ? ', no controller known' : `, controller node ${cluster.controller}`}, term ${cluster.term}, ${cluster.in_quorum ? 'in quorum' : 'OUT OF QUORUM'}`
      : 'a single node'],
  ])
}

export function mount(ctx) {
  ctx.setPage('Overview', [])
  const serverBody = h('div')
  const ratesBody = h('div')
  const ratesError = h('p', { class: 'error', role: 'alert', hidden: true })
  const topicsBody = h('div')
  const topicsError = h('p', { class: 'error', role: 'alert', hidden: true })
  const minutes = h('select', { id: 'rate-minutes', onchange: () => ctx.refresh() },
    [5, 15].map((m) => h('option', { value: String(m) }, `last ${m} minutes`)))
  const filter = h('input', { id: 'topic-filter', type: 'search', placeholder: 'stream/topic', autocomplete: 'off' })
  let lastTopics = null
  const renderTopics = () => {
    if (!lastTopics) return
    const needle = filter.value.trim().toLowerCase()
    const shown = lastTopics.topics.filter((t) => `${t.stream}/${t.topic}`.toLowerCase().includes(needle))
    replace(topicsBody,
      table({
        key: 'topics',
        caption: 'Topics',
        empty: needle ? 'No topic matches the filter.' : 'No topics yet.',
        columns: ['Topic', ['Partitions', { numeric: true }], ['Records', { numeric: true }], ['Size', { numeric: true }],
          ['Segments', { numeric: true }], ['In (records/s)', { numeric: true }], ['Out (records/s)', { numeric: true }], 'Health'],
        rows: shown.map((t) => ({
          attrs: { dataset: { topic: `${t.stream}/${t.topic}` } },
          cells: [
            link(topicHref(t.stream, t.topic), `${t.stream}/${t.topic}`),
            fmt.count(t.options.partitions),
            fmt.count(t.totals.records),
            fmt.bytes(t.totals.bytes),
            fmt.count(t.totals.segments),
            t.rates ? fmt.short(t.rates.records_in_per_second) : '—',
            t.rates ? fmt.short(t.rates.records_out_per_second) : '—',
            t.totals.failed_partitions
              ? h('span', { class: 'bad' }, `${t.totals.failed_partitions} failed`)
              : h('span', { class: 'good' }, 'ok'),
          ],
        })),
      }),
      lastTopics.more ? h('p', { class: 'muted' }, `Only the first ${fmt.count(TOPICS_MAX)} topics are listed.`) : null)
  }
  filter.addEventListener('input', renderTopics)

  const topicsHeader = h('div', { class: 'section-head' },
    h('h2', null, 'Topics'),
    h('div', { class: 'tools' },
      h('label', { for: 'topic-filter' }, 'Filter'), filter,
      ctx.writes
        ? h('button', {
          type: 'button',
          class: 'primary',
          onclick: () => createTopic({
            done: (stream, topic) => {
              ctx.notify(`Created topic ${stream}/${topic}.`)
              ctx.refresh()
            },
          }),
        }, 'Create topic')
        : null))
  const groups = groupsSection(ctx, { scope: 'all' })
  ctx.main.append(
    h('h1', { tabindex: '-1' }, 'Overview'),
    h('section', { class: 'card' },
      h('div', { class: 'section-head' }, h('h2', null, 'Throughput'),
        h('div', { class: 'tools' }, h('label', { for: 'rate-minutes' }, 'Show'), minutes)),
      ratesError, ratesBody),
    h('section', { class: 'card', 'aria-labelledby': 'topics-heading' }, topicsHeader, topicsError, topicsBody),
    h('div', { class: 'two-columns' }, groups.element, section('Server', null, serverBody)))
  topicsHeader.querySelector('h2').id = 'topics-heading'

  const show = (box, error) => {
    if (error instanceof ApiError && error.unreachable) return
    box.textContent = error ? describeError(error) : ''
    box.hidden = !error
  }

  return {
    async refresh(alive) {
      if (ctx.info) replace(serverBody, serverFacts(ctx.info))
      const [rates, topics] = await Promise.allSettled([
        get('/api/v1/rates', { minutes: minutes.value }),
        allTopics(),
      ])
      if (!alive()) return
      if (rates.status === 'fulfilled') {
        replace(ratesBody, rateCharts(rates.value))
        show(ratesError, null)
      } else {
        show(ratesError, rates.reason)
      }
      if (topics.status === 'fulfilled') {
        lastTopics = topics.value
        renderTopics()
        show(topicsError, null)
        await groups.refresh(alive, topics.value.topics)
      } else {
        show(topicsError, topics.reason)
      }
    },
  }
}
