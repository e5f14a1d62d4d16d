// The console's shell: the header with the server's facts, the banner shown while the
// server cannot be reached, hash routing (so the back button and bookmarks work), and
// the live refresh: the current page is refreshed every few seconds while the tab is
// visible, and not at all while it is hidden.
//
// A page is a module with `mount(ctx, params, query)` that builds its skeleton into
// `ctx.main` and returns `{refresh}`; `refresh()` fetches and re-renders its data. The
// shell never runs two refreshes at once, and drops a page's refresh once the user
// left it.

import { ApiError, describeError, get, isReachable, loadOperations, onReachability, operationsKnown } from './api.js'
import { h, replace } from './dom.js'
import { duration } from './format.js'
import * as overview from './pages/overview.js'
import * as topic from './pages/topic.js'
import * as messages from './pages/messages.js'
import * as group from './pages/group.js'

/** Time between refreshes while the server answers (its rate sampler's interval). */
const REFRESH_MS = 5000
/** Time between attempts while it does not. */
const RETRY_MS = 2000

const NAME = '([^/]+)'
const ROUTES = [
  [new RegExp('^/?$'), overview],
  [new RegExp(`^/topics/${NAME}/${NAME}$`), topic],
  [new RegExp(`^/topics/${NAME}/${NAME}/messages$`), messages],
  [new RegExp(`^/topics/${NAME}/${NAME}/groups/${NAME}$`), group],
]

const main = document.getElementById('main')
const banner = document.getElementById('banner')
const crumbs = document.getElementById('crumbs')
const serverFacts = document.getElementById('server-facts')
const notice = document.getElementById('notice')

const ctx = {
  main,
  /** The last answer of `GET /api/v1/info`. */
  info: null,
  /** Whether the server takes writes over HTTP (`--http-admin-writes`). */
  get writes() {
    return Boolean(this.info && this.info.admin_writes)
  },
  /** Sets the document's title and the breadcrumb trail (`[[label, href], …]`, the
   * last one the current page, without a link). */
  setPage(title, trail) {
    document.title = title ? `${title} · Rill` : 'Rill'
    const items = [['Overview', '#/'], ...trail]
    replace(crumbs, items.map(([label, href], i) => h('li', null,
      i === items.length - 1
        ? h('span', { 'aria-current': 'page' }, label)
        : h('a', { href }, label))))
  },
  /** Shows a short message that goes away by itself (after a write). */
  notify(text) {
    notice.textContent = text
    notice.hidden = false
    clearTimeout(ctx.noticeTimer)
    ctx.noticeTimer = setTimeout(() => { notice.hidden = true }, 6000)
  },
  /** Refreshes the page now (after a write changed what it shows). */
  refresh() {
    return refreshNow()
  },
}

let page = null
let pageId = 0

function route() {
  const raw = location.hash.replace(/^#/, '') || '/'
  const [path, queryText] = raw.split('?', 2)
  const query = new URLSearchParams(queryText || '')
  for (const [pattern, module] of ROUTES) {
    const m = pattern.exec(path)
    if (!m) continue
    try {
      return { module, params: m.slice(1).map(decodeURIComponent), query }
    } catch {
      break
    }
  }
  return { module: null, params: [], query }
}

function mountPage({ first = false, force = false } = {}) {
  const { module, params, query } = route()
  const key = JSON.stringify(params)
  if (!force && page && page.module === module && page.key === key && page.update) {
    // The same page at another place (the message browser's paging): it moves there
    // itself, keeping the form and the focus where they are.
    page.update(query)
    return
  }
  pageId += 1
  main.replaceChildren()
  if (!module) {
    ctx.setPage('Not found', [['Not found']])
    main.append(h('h1', { tabindex: '-1' }, 'No such page'),
      h('p', null, 'The console has no page at this address. ', h('a', { href: '#/' }, 'Go to the overview.')))
    page = null
    return
  }
  page = { id: pageId, module, key, writes: ctx.writes, operations: operationsKnown(), ...module.mount(ctx, params, query) }
  if (!first) {
    // Moves the keyboard and screen reader focus to the new page's heading.
    const heading = main.querySelector('h1')
    if (heading) heading.focus({ preventScroll: true })
    window.scrollTo(0, 0)
  }
  refreshNow()
}

function renderServerFacts() {
  const info = ctx.info
  if (!info) return
  const parts = [h('span', null, `Rill ${info.version}`)]
  parts.push(h('span', null, `up ${duration(info.uptime_seconds)}`))
  if (info.user) parts.push(h('span', null, `signed in as ${info.user}`))
  if (info.cluster) parts.push(h('span', null, `node ${info.cluster.node_id} (${info.cluster.role})`))
  parts.push(h('span', { class: info.admin_writes ? 'badge badge-warn' : 'badge' }, info.admin_writes ? 'writes enabled' : 'read-only'))
  replace(serverFacts, parts)
}

let running = null
let again = false

/** Refreshes the server's facts and the current page; a call while one runs makes
 * one more run after it (never two at once). */
function refreshNow() {
  if (running) {
    again = true
    return running
  }
  running = (async () => {
    do {
      again = false
      await refreshOnce()
    } while (again)
    running = null
  })()
  return running
}

async function refreshOnce() {
  try {
    await loadOperations()
    const info = await get('/api/v1/info')
    ctx.info = info
    renderServerFacts()
    if (page && (page.writes !== ctx.writes || page.operations !== operationsKnown())) {
      // The page was built before the server's settings and endpoints were known (it
      // could not be reached), or the server restarted with other settings: build it
      // again around them.
      mountPage({ first: true, force: true })
      return
    }
  } catch (error) {
    if (!(error instanceof ApiError && error.unreachable)) showShellError(error)
    return
  }
  clearShellError()
  const current = page
  if (!current) return
  try {
    await current.refresh(() => current.id === pageId)
  } catch (error) {
    // A page shows its own errors; one that escaped it is a bug worth seeing.
    if (!(error instanceof ApiError && error.unreachable)) showShellError(error)
  }
}

function showShellError(error) {
  const box = document.getElementById('shell-error')
  box.textContent = describeError(error)
  box.hidden = false
}

function clearShellError() {
  document.getElementById('shell-error').hidden = true
}

let timer = null

function schedule() {
  clearTimeout(timer)
  if (document.hidden) return
  timer = setTimeout(async () => {
    await refreshNow()
    schedule()
  }, isReachable() ? REFRESH_MS : RETRY_MS)
}

onReachability((reachable) => {
  banner.hidden = reachable
  if (reachable) refreshNow()
  schedule()
})

document.addEventListener('visibilitychange', () => {
  if (document.hidden) {
    clearTimeout(timer)
  } else {
    refreshNow()
    schedule()
  }
})

window.addEventListener('hashchange', () => mountPage())

/** Starts the console: the server's facts first, so the first page is built knowing
 * whether it takes writes. */
async function boot() {
  document.getElementById('banner-origin').textContent = location.origin
  try {
    await loadOperations()
    ctx.info = await get('/api/v1/info')
    renderServerFacts()
  } catch (error) {
    if (!(error instanceof ApiError && error.unreachable)) showShellError(error)
  }
  mountPage({ first: true })
  schedule()
}

boot()
