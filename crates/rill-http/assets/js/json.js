// Pretty-printing a record's JSON value from its text, without parsing it into
// JavaScript values: a number like 12345678901234567890 or 0.10 stays exactly as
// written, keys keep their order (duplicates too). The server sends `json` only for a
// value whose whole text is one JSON document (docs/HTTP_API.md §4), so the text is
// valid JSON here; the scanner still never loops or throws on anything else, it only
// re-spaces what it is given.

import { h } from './dom.js'

const INDENT = '  '

/** The value's text re-indented, as segments `[kind, text]` where `kind` is `key`,
 * `string`, `number`, `literal`, `punct` or `space`. */
export function prettyJson(text) {
  const out = []
  let depth = 0
  let i = 0
  const n = text.length
  const newline = () => out.push(['space', `\n${INDENT.repeat(depth)}`])
  const nextSignificant = (from) => {
    let j = from
    while (j < n && ' \t\r\n'.includes(text[j])) j += 1
    return j
  }
  while (i < n) {
    const c = text[i]
    if (' \t\r\n'.includes(c)) {
      i += 1
    } else if (c === '{' || c === '[') {
      const close = c === '{' ? '}' : ']'
      const j = nextSignificant(i + 1)
      if (text[j] === close) {
        out.push(['punct', c + close])
        i = j + 1
      } else {
        out.push(['punct', c])
        depth += 1
        newline()
        i += 1
      }
    } else if (c === '}' || c === ']') {
      depth = Math.max(0, depth - 1)
      newline()
      out.push(['punct', c])
      i += 1
    } else if (c === ',') {
      out.push(['punct', ','])
      newline()
      i += 1
    } else if (c === ':') {
      out.push(['punct', ': '])
      i += 1
    } else if (c === '"') {
      let j = i + 1
      while (j < n && text[j] !== '"') j += text[j] === '\\' ? 2 : 1
      const token = text.slice(i, Math.min(j + 1, n))
      const after = nextSignificant(j + 1)
      out.push([text[after] === ':' ? 'key' : 'string', token])
      i = j + 1
    } else {
      let j = i
      while (j < n && !' \t\r\n{}[],:"'.includes(text[j])) j += 1
      if (j === i) j = i + 1
      const token = text.slice(i, j)
      out.push([/^[-0-9]/.test(token) ? 'number' : 'literal', token])
      i = j
    }
  }
  return out
}

/** The segments as nodes of a `<pre>`, cut after `maxChars` characters (all of them
 * when `maxChars` is Infinity). Resolves `{nodes, shown, total}` in characters. */
export function renderJson(segments, maxChars) {
  const nodes = []
  let shown = 0
  let total = 0
  for (const [kind, text] of segments) {
    total += text.length
    if (shown >= maxChars) continue
    const part = shown + text.length > maxChars ? text.slice(0, maxChars - shown) : text
    shown += part.length
    nodes.push(kind === 'space' ? part : h('span', { class: `j-${kind}` }, part))
  }
  return { nodes, shown, total }
}
