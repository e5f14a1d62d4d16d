// Building the page's elements. Everything the console shows is made with these
// helpers from strings that become text nodes or attribute values, never markup: a
// topic name, a key or a record's value can hold "<script>" and still show as text.
// No module of the console assigns innerHTML.

const SVG_NS = 'http://www.w3.org/2000/svg'

// Sets attributes and event handlers: `on…` keys take functions, `class`, `text` and
// `dataset` are shorthands, `false`/`null`/`undefined` leave an attribute out, `true`
// sets it empty (a boolean attribute).
function apply(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue
    if (name.startsWith('on') && typeof value === 'function') {
      el.addEventListener(name.slice(2), value)
    } else if (name === 'text') {
      el.textContent = String(value)
    } else if (name === 'dataset') {
      Object.assign(el.dataset, value)
    } else if (name === 'value' && 'value' in el) {
      el.value = String(value)
    } else if (name === 'checked' || name === 'selected') {
      el[name] = Boolean(value)
    } else {
      el.setAttribute(name, value === true ? '' : String(value))
    }
  }
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue
    if (Array.isArray(child)) append(el, child)
    else if (child instanceof Node) el.appendChild(child)
    else el.appendChild(document.createTextNode(String(child)))
  }
}

/** An HTML element: `h('a', {href: '#/'}, 'Overview')`. Children are nodes, strings
 * (as text), arrays of either, or nothing. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag)
  apply(el, attrs)
  append(el, children)
  return el
}

/** An SVG element, as `h`. */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag)
  apply(el, attrs)
  append(el, children)
  return el
}

/** Replaces the children of `container`, keeping the scroll position of every
 * element inside it marked with `data-scroll-key` (wide tables scroll in their own
 * box, and a refresh every few seconds must not jump them back). */
export function replace(container, ...children) {
  const scrolls = new Map()
  for (const el of container.querySelectorAll('[data-scroll-key]')) {
    scrolls.set(el.dataset.scrollKey, [el.scrollLeft, el.scrollTop])
  }
  container.replaceChildren()
  append(container, children)
  for (const el of container.querySelectorAll('[data-scroll-key]')) {
    const saved = scrolls.get(el.dataset.scrollKey)
    if (saved) [el.scrollLeft, el.scrollTop] = saved
  }
}

/** A table in a box of its own that scrolls sideways when the table is wider than
 * the page. `columns` are `[label, {numeric}]` or labels; `rows` arrays of cells
 * (nodes or strings), or `{cells, attrs}`. */
export function table({ key, caption, columns, rows, empty }) {
  const head = h('tr', null, columns.map((c) => {
    const [label, opts] = Array.isArray(c) ? c : [c, {}]
    return h('th', { scope: 'col', class: opts.numeric ? 'num' : null }, label)
  }))
  const numeric = columns.map((c) => Array.isArray(c) && Boolean(c[1].numeric))
  const body = rows.length === 0
    ? [h('tr', null, h('td', { colspan: columns.length, class: 'empty' }, empty || 'None.'))]
    : rows.map((row) => {
      const { cells, attrs } = Array.isArray(row) ? { cells: row, attrs: null } : row
      return h('tr', attrs, cells.map((cell, i) => h('td', { class: numeric[i] ? 'num' : null }, cell)))
    })
  return h('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': caption, dataset: { scrollKey: key } },
    h('table', null,
      h('caption', { class: 'visually-hidden' }, caption),
      h('thead', null, head),
      h('tbody', null, body)))
}

/** A list of label/value pairs. */
export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter(Boolean).map(([label, value]) => [
    h('dt', null, label),
    h('dd', null, value),
  ]))
}

/** A link inside the console. */
export function link(href, text, attrs) {
  return h('a', { href, ...attrs }, text)
}

/** A section with a heading. */
export function section(title, attrs, ...children) {
  return h('section', { class: 'card', ...attrs }, h('h2', null, title), children)
}
