// The admin JSON API (docs/HTTP_API.md), as the console uses it: every request goes
// to this origin with the browser's credentials for it (HTTP Basic, once the browser
// asked for them), and every failure becomes an `ApiError` whose message is meant to
// be shown as it is.
//
// Reachability: a request that gets no HTTP answer at all (the server is stopped, the
// network is down) marks the server unreachable; any answer, even an error, marks it
// reachable again. The page shows its banner from that state.

const listeners = new Set()
let reachable = true

/** Calls `fn(reachable)` whenever the server's reachability changes. */
export function onReachability(fn) {
  listeners.add(fn)
}

export function isReachable() {
  return reachable
}

function setReachable(value) {
  if (value === reachable) return
  reachable = value
  for (const fn of listeners) fn(value)
}

/** A failed request: `status` is the HTTP status (0 when the server could not be
 * reached), `code` the API's error code (docs/HTTP_API.md §2.1). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.code = code
  }

  get unreachable() {
    return this.status === 0
  }
}

/** Words for an error answer whose body is not the API's JSON. */
function statusWords(status) {
  const words = {
    401: 'the server needs a user and password (reload the page to be asked)',
    403: 'permission denied',
    404: 'not found',
    413: 'the request is too large',
    500: 'the server failed',
    502: 'bad gateway',
    503: 'the server is unavailable',
  }
  return words[status] || `HTTP status ${status}`
}

async function request(method, path, { query, body } = {}) {
  let url = path
  if (query) {
    const params = new URLSearchParams()
    for (const [k, v] of Object.entries(query)) {
      if (v !== undefined && v !== null && v !== '') params.set(k, String(v))
    }
    const text = params.toString()
    if (text) url += `?${text}`
  }
  const init = { method, headers: { Accept: 'application/json' }, cache: 'no-store' }
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json'
    init.body = JSON.stringify(body)
  }
  let response
  try {
    response = await fetch(url, init)
  } catch {
    setReachable(false)
    throw new ApiError(0, 'UNREACHABLE', 'The server could not be reached.')
  }
  setReachable(true)
  if (response.status === 204) return null
  const text = await response.text()
  let json = null
  try {
    json = text ? JSON.parse(text) : null
  } catch {
    // Not JSON: an answer from something in between, or a plain-text error.
  }
  if (!response.ok) {
    const error = json && json.error
    if (error && typeof error.message === 'string') {
      throw new ApiError(response.status, String(error.code || ''), error.message)
    }
    throw new ApiError(response.status, '', statusWords(response.status))
  }
  if (json === null) throw new ApiError(response.status, '', 'the server sent an answer that is not JSON')
  return json
}

/** `GET` an API path; resolves its JSON. */
export function get(path, query) {
  return request('GET', path, { query })
}

/** `POST`, `DELETE` (…) with an optional JSON body; resolves its JSON (or null for
 * `204 No Content`). */
export function send(method, path, body) {
  return request(method, path, { body })
}

/** The path of a topic's API resource. Names follow the protocol's rule (letters,
 * digits, `.`, `_`, `-`), but they are encoded anyway: they come from the URL. */
export function topicPath(stream, topic) {
  return `/api/v1/streams/${encodeURIComponent(stream)}/topics/${encodeURIComponent(topic)}`
}

/** The error as a sentence for the page. An error that is not an `ApiError` is the
 * console's own bug, so it is also logged to the browser's console (where the browser
 * tests look for errors). */
export function describeError(error) {
  if (error instanceof ApiError) {
    if (error.unreachable) return error.message
    return error.code ? `${error.message} (${error.code})` : `The server answered: ${error.message}.`
  }
  console.error(error)
  return `Something failed in the console: ${error && error.message ? error.message : error}`
}

// The paths and methods the server's API has, from its OpenAPI document: parts of the
// console that need an endpoint some servers lack (a newer API) are shown only where
// it exists.
let operations = null

/** Loads the list of operations once (again after a failure). */
export async function loadOperations() {
  if (operations) return operations
  const doc = await get('/api/v1/openapi.json')
  const found = new Set()
  for (const [path, ops] of Object.entries(doc.paths || {})) {
    for (const method of Object.keys(ops)) found.add(`${method.toUpperCase()} ${path}`)
  }
  operations = found
  return operations
}

/** Whether the list of operations was loaded. */
export function operationsKnown() {
  return operations !== null
}

/** Whether the API has `METHOD path` (a path as the OpenAPI document writes it, with
 * `{stream}`-style parameters). False until the document was loaded. */
export function has(method, path) {
  return Boolean(operations && operations.has(`${method.toUpperCase()} ${path}`))
}
