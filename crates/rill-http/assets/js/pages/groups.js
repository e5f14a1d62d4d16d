// The consumer groups and named consumers of one topic or of every topic, for the
// overview and the topic page. They are listed from the API's group and consumer
// listings where the server has them (its OpenAPI document says so); a server without
// them still describes a group by name, so then the section offers to open one.

import { ApiError, describeError, get, has, topicPath } from '../api.js'
import { h, replace, table } from '../dom.js'
import * as fmt from '../format.js'
import { resetOffsets } from '../writes.js'

const GROUPS_PATH = '/api/v1/streams/{stream}/topics/{topic}/groups'
const CONSUMERS_PATH = '/api/v1/streams/{stream}/topics/{topic}/consumers'
/** Topics whose groups the overview lists at most (one request each). */
export const OVERVIEW_TOPICS_MAX = 25
/** How often the overview lists every topic's groups again. Each listing is a request,
 * and under `--auth` each request's Basic credential costs the server an Argon2id
 * check, so the overview asks for them at a third of the page's pace. */
const OVERVIEW_LISTING_MS = 15_000
/** Entries of one listing read at most (pages of the API's size). */
const LISTING_MAX = 5000

function href(stream, topic, group) {
  return `#/topics/${encodeURIComponent(stream)}/${encodeURIComponent(topic)}/groups/${encodeURIComponent(group)}`
}

/** Every entry of a paged listing (`{<key>: [...], next}`). */
async function listAll(path, key) {
  const out = []
  let after
  do {
    const page = await get(path, { after })
    out.push(...page[key])
    after = page.next
  } while (after && out.length < LISTING_MAX)
  return out
}

/** The groups of a topic, from the API's listing. */
export function listGroups(stream, topic) {
  return listAll(`${topicPath(stream, topic)}/groups`, 'groups')
}

/** The named consumers of a topic, from the API's listing. */
export function listConsumers(stream, topic) {
  return listAll(`${topicPath(stream, topic)}/consumers`, 'consumers')
}

/** A form that opens a group's page by name (for servers that do not list groups);
 * with more than one topic, the topic is picked too. */
function openByName(topics) {
  const select = h('select', { id: 'open-group-topic', required: true },
    topics.map((t) => h('option', { value: `${t.stream}/${t.topic}` }, `${t.stream}/${t.topic}`)))
  const name = h('input', { id: 'open-group-name', required: true, autocomplete: 'off', spellcheck: 'false', pattern: '[A-Za-z0-9._\\-]{1,255}' })
  const form = h('form', { class: 'inline-form' },
    topics.length > 1 ? [h('label', { for: 'open-group-topic' }, 'Topic'), select] : null,
    h('label', { for: 'open-group-name' }, 'Group'), name,
    h('button', { type: 'submit' }, 'Open group'))
  form.addEventListener('submit', (event) => {
    event.preventDefault()
    if (!form.reportValidity()) return
    const [stream, topic] = select.value.split('/')
    location.hash = href(stream, topic, name.value)
  })
  return form
}

/**
 * The section. `scope` is `'all'` (the overview: every topic's groups) or
 * `{stream, topic}`. Its `refresh(alive, topics)` takes the topics the page already
 * has (`[{stream, topic}]`; for one topic with its `partitions` numbers too).
 */
export function groupsSection(ctx, { scope }) {
  const body = h('div')
  const consumersBody = h('div')
  const error = h('p', { class: 'error', role: 'alert', hidden: true })
  const one = scope !== 'all'
  const element = h('section', { class: 'card', 'aria-labelledby': 'groups-heading' },
    h('h2', { id: 'groups-heading' }, one ? 'Consumer groups and named consumers' : 'Consumer groups'),
    error, body, one ? consumersBody : null)
  let fallbackFor = null
  let listed = null

  async function refresh(alive, topics) {
    if (!has('GET', GROUPS_PATH)) {
      // Built once per set of topics, so what is being typed is not lost.
      const key = topics.map((t) => `${t.stream}/${t.topic}`).join(' ')
      if (fallbackFor !== key) {
        fallbackFor = key
        replace(body,
          h('p', { class: 'muted' }, 'This server does not list consumer groups; open one by its name.'),
          topics.length ? openByName(topics) : h('p', null, 'No topics yet.'))
      }
    } else {
      const shown = topics.slice(0, OVERVIEW_TOPICS_MAX)
      const key = shown.map((t) => `${t.stream}/${t.topic}`).join(' ')
      if (!one && listed && listed.key === key && Date.now() - listed.at < OVERVIEW_LISTING_MS) return
      let rows
      try {
        const lists = await Promise.all(shown.map(async (t) => ({ t, groups: await listGroups(t.stream, t.topic) })))
        rows = lists.flatMap(({ t, groups }) => groups.map((g) => ({ ...g, stream: t.stream, topic: t.topic })))
      } catch (e) {
        if (!alive()) return
        showError(e)
        return
      }
      if (!alive()) return
      listed = { key, at: Date.now() }
      const columns = ['Group', ...(one ? [] : ['Topic']), ['Live members', { numeric: true }], ['Lag', { numeric: true }]]
      replace(body,
        table({
          key: 'groups',
          caption: 'Consumer groups',
          empty: 'No consumer groups.',
          columns,
          rows: rows.map((g) => ({
            attrs: { dataset: { group: g.group } },
            cells: [
              h('a', { href: href(g.stream, g.topic, g.group) }, g.group),
              ...(one ? [] : [h('a', { href: `#/topics/${encodeURIComponent(g.stream)}/${encodeURIComponent(g.topic)}` }, `${g.stream}/${g.topic}`)]),
              fmt.count(g.members),
              fmt.count(g.lag),
            ],
          })),
        }),
        !one && topics.length > shown.length
          ? h('p', { class: 'muted' }, `Groups of the first ${OVERVIEW_TOPICS_MAX} topics; the others are on their topic's page.`)
          : null)
    }
    if (one && has('GET', CONSUMERS_PATH)) {
      let consumers
      try {
        consumers = await listConsumers(scope.stream, scope.topic)
      } catch (e) {
        if (!alive()) return
        showError(e)
        return
      }
      if (!alive()) return
      const resettable = ctx.writes && has('POST', `${CONSUMERS_PATH}/{consumer}/reset`)
      const reset = (c) => h('button', {
        type: 'button',
        onclick: () => resetOffsets({
          kind: 'consumer',
          stream: scope.stream,
          topic: scope.topic,
          name: c.consumer,
          partitions: topics[0].partitions,
          done: (offsets) => {
            ctx.notify(`Reset named consumer ${c.consumer}: ${offsets.map((o) => `partition ${o.partition} at ${o.offset === null ? 'none' : fmt.count(o.offset)}`).join(', ')}.`)
            ctx.refresh()
          },
        }),
      }, 'Reset')
      replace(consumersBody,
        h('h3', null, 'Named consumers'),
        table({
          key: 'consumers',
          caption: 'Named consumers',
          empty: 'No named consumers.',
          columns: ['Consumer', 'Stored offsets (partition: offset)', ['Lag', { numeric: true }], ...(resettable ? [''] : [])],
          rows: consumers.map((c) => ({
            attrs: { dataset: { consumer: c.consumer } },
            cells: [
              c.consumer,
              c.partitions.map((p) => `${p.partition}: ${fmt.count(p.offset)}`).join(', ') || '—',
              fmt.count(c.lag),
              ...(resettable ? [reset(c)] : []),
            ],
          })),
        }))
    }
    showError(null)
  }

  function showError(e) {
    if (e instanceof ApiError && e.unreachable) return
    error.textContent = e ? describeError(e) : ''
    error.hidden = !e
  }

  return { element, refresh }
}
