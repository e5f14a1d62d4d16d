// Write actions: forms in modal dialogs, shown only when the server takes writes over
// HTTP (`rill serve --http-admin-writes`, `admin_writes` in /api/v1/info). What the
// server refuses is shown in the dialog in its own words; the dialog stays open so
// the input can be corrected.

import { ApiError, describeError, send, topicPath } from './api.js'
import { h } from './dom.js'

/** The protocol's name rule (docs/PROTOCOL.md §7), checked before sending so a typo
 * is pointed at in the form; the server checks it again. */
const NAME_PATTERN = '[A-Za-z0-9._\\-]{1,255}'

function nameProblem(name) {
  if (!new RegExp(`^${NAME_PATTERN}$`).test(name)) {
    return 'Use 1 to 255 letters, digits, dots, underscores or hyphens.'
  }
  if (name === '.' || name === '..') return 'A name cannot be . or ..'
  return null
}

let dialogCount = 0

/**
 * Opens a modal dialog with a form.
 * - `fields`: the form's content (nodes).
 * - `submit(form)`: does the action; resolves to close the dialog, throws to show the
 *   error in it.
 * - `danger`: the submit button is styled as destructive.
 */
export function openDialog({ title, intro, fields, submitLabel, danger = false, submit, ready }) {
  dialogCount += 1
  const titleId = `dialog-title-${dialogCount}`
  const error = h('p', { class: 'error', role: 'alert', hidden: true })
  const submitButton = h('button', { type: 'submit', class: danger ? 'danger' : 'primary' }, submitLabel)
  const cancel = h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel')
  const form = h('form', { novalidate: true },
    h('h2', { id: titleId }, title),
    intro ? h('p', null, intro) : null,
    fields,
    error,
    h('div', { class: 'actions' }, cancel, submitButton))
  const dialog = h('dialog', { 'aria-labelledby': titleId }, form)
  dialog.addEventListener('close', () => dialog.remove())
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    error.hidden = true
    if (!form.checkValidity()) {
      form.reportValidity()
      return
    }
    submitButton.disabled = true
    try {
      await submit(form)
      dialog.close()
    } catch (e) {
      error.textContent = e instanceof ApiError ? `The server refused: ${describeError(e)}` : describeError(e)
      error.hidden = false
    } finally {
      submitButton.disabled = false
    }
  })
  document.body.append(dialog)
  dialog.showModal()
  if (ready) ready(form, submitButton)
  return dialog
}

/** A labelled control; `hint` is read with it (aria-describedby). `input` is the
 * element the label names when the control is a group (a number and its unit). */
export function field(label, control, hint, input = control) {
  dialogCount += 1
  const id = `field-${dialogCount}`
  input.id = id
  const hintNode = hint ? h('small', { id: `${id}-hint` }, hint) : null
  if (hintNode) input.setAttribute('aria-describedby', hintNode.id)
  return h('div', { class: 'field' }, h('label', { for: id }, label), control, hintNode)
}

/** A name input that checks the protocol's rule as it is typed. */
function nameInput(name, value) {
  const input = h('input', { name, required: true, value: value || '', autocomplete: 'off', spellcheck: 'false', maxlength: 255 })
  input.addEventListener('input', () => input.setCustomValidity(input.value ? nameProblem(input.value) || '' : ''))
  return input
}

const TIME_UNITS = [['minutes', 60_000], ['hours', 3_600_000], ['days', 86_400_000]]
const SIZE_UNITS = [['MiB', 1 << 20], ['GiB', 1 << 30]]

/** A number with a unit select; resolves to its value times the unit, or null when
 * left empty (the server's default). */
function amount(name, units, defaultUnit) {
  const number = h('input', { name, type: 'number', min: '1', step: '1', inputmode: 'numeric' })
  const unit = h('select', { name: `${name}-unit`, 'aria-label': 'unit' },
    units.map(([label]) => h('option', { value: label, selected: label === defaultUnit }, label)))
  return {
    nodes: h('span', { class: 'amount' }, number, unit),
    number,
    value() {
      if (number.value === '') return null
      const factor = units.find(([label]) => label === unit.value)[1]
      return Math.round(Number(number.value) * factor)
    },
  }
}

/** The "create a topic" dialog; `done(stream, topic)` after the server made it. */
export function createTopic({ stream, done }) {
  const streamInput = nameInput('stream', stream)
  const topicInput = nameInput('topic')
  const partitions = h('input', { name: 'partitions', type: 'number', min: '1', max: '100000', step: '1', value: '1', required: true })
  const retention = amount('retention', TIME_UNITS, 'days')
  const retentionBytes = amount('retention-bytes', SIZE_UNITS, 'GiB')
  const durability = h('select', { name: 'durability' },
    h('option', { value: '' }, 'the server\'s default'),
    h('option', { value: 'always' }, 'always: acknowledged once synced to disk'),
    h('option', { value: 'interval' }, 'interval: synced every few milliseconds'),
    h('option', { value: 'never' }, 'never: synced only on segment roll and close'))
  const interval = h('input', { name: 'interval', type: 'number', min: '1', step: '1', value: '1000' })
  const intervalField = field('Sync interval (ms)', interval)
  intervalField.hidden = true
  durability.addEventListener('change', () => {
    intervalField.hidden = durability.value !== 'interval'
  })
  openDialog({
    title: 'Create a topic',
    fields: [
      field('Stream', streamInput, 'Made if it does not exist.'),
      field('Topic', topicInput),
      field('Partitions', partitions),
      field('Retention time', retention.nodes, 'Empty: the server\'s default.', retention.number),
      field('Retention size per partition', retentionBytes.nodes, 'Empty: no size limit.', retentionBytes.number),
      field('Durability', durability),
      intervalField,
    ],
    submitLabel: 'Create topic',
    ready: () => (stream ? topicInput : streamInput).focus(),
    async submit() {
      const body = { topic: topicInput.value, partitions: Number(partitions.value) }
      const ms = retention.value()
      if (ms !== null) body.retention_ms = ms
      const size = retentionBytes.value()
      if (size !== null) body.retention_bytes = size
      if (durability.value === 'interval') body.durability = `interval:${interval.value}`
      else if (durability.value) body.durability = durability.value
      await send('POST', `/api/v1/streams/${encodeURIComponent(streamInput.value)}/topics`, body)
      done(streamInput.value, topicInput.value)
    },
  })
}

/**
 * A destructive action confirmed by typing a word (the thing's name), so that a
 * stray click or Enter deletes nothing.
 */
export function confirmByName({ title, intro, name, submitLabel, action }) {
  const input = h('input', { name: 'confirm', required: true, autocomplete: 'off', spellcheck: 'false' })
  openDialog({
    title,
    intro,
    fields: [field(`Type ${name} to confirm`, input)],
    submitLabel,
    danger: true,
    ready: (form, button) => {
      button.disabled = true
      input.addEventListener('input', () => { button.disabled = input.value !== name })
      input.focus()
    },
    async submit() {
      if (input.value !== name) throw new Error(`type ${name} to confirm`)
      await action()
    },
  })
}

/** The "delete a topic" dialog. */
export function deleteTopic({ stream, topic, records, done }) {
  const full = `${stream}/${topic}`
  confirmByName({
    title: `Delete ${full}?`,
    intro: `This deletes the topic with its ${records === undefined ? '' : `${records} `}records and the stored offsets of its groups and consumers. It cannot be undone.`,
    name: full,
    submitLabel: 'Delete topic',
    async action() {
      await send('DELETE', topicPath(stream, topic))
      done()
    },
  })
}
