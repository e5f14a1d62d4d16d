// Write actions: forms in modal dialogs, shown only when the server takes writes over
// HTTP (`rill serve --http-admin-writes`, `admin_writes` in /api/v1/info). What the
// server refuses is shown in the dialog in its own words; the dialog stays open so
// the input can be corrected.

import { ApiError, describeError, send, topicPath } from './api.js'
import { h } from './dom.js'
import * as fmt from './format.js'

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

/** A problem with what was typed into a form, found before anything was sent. */
class FormProblem extends Error {}

/**
 * Opens a modal dialog with a form.
 * - `fields`: the form's content (nodes).
 * - `submit(form)`: does the action; resolves to close the dialog (`false`: it stays
 *   open), throws to show the error in it.
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
      if ((await submit(form)) !== false) dialog.close()
    } catch (e) {
      if (e instanceof FormProblem) error.textContent = e.message
      else if (e instanceof ApiError && !e.unreachable) error.textContent = `The server refused: ${describeError(e)}`
      else error.textContent = describeError(e)
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
 * left empty (the server's default). `label` names the number when no field label
 * points at it. */
function amount(name, units, defaultUnit, label) {
  const number = h('input', { name, type: 'number', min: '1', step: '1', inputmode: 'numeric', 'aria-label': label })
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
      // The button is disabled until the name matches; Enter in the field is not.
      if (input.value !== name) return false
      await action()
      return true
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

/** A limit that can stay, be removed or be set: a select and an amount. Resolves to
 * `undefined` (unchanged), `null` (removed) or the new value. */
function limitChange(name, label, units, defaultUnit, current, describe) {
  const mode = h('select', { name: `${name}-mode` },
    h('option', { value: 'keep' }, `keep (now ${current === null ? 'no limit' : describe(current)})`),
    h('option', { value: 'none' }, 'no limit'),
    h('option', { value: 'set' }, 'set to'))
  const value = amount(name, units, defaultUnit, `New ${label.toLowerCase()}`)
  value.nodes.hidden = true
  value.number.required = false
  mode.addEventListener('change', () => {
    value.nodes.hidden = mode.value !== 'set'
    value.number.required = mode.value === 'set'
  })
  return {
    nodes: h('span', { class: 'amount' }, mode, value.nodes),
    mode,
    number: value.number,
    change() {
      if (mode.value === 'keep') return undefined
      if (mode.value === 'none') return null
      return value.value()
    },
  }
}

/** The "change a topic" dialog (`PATCH` of the topic): retention, durability, more
 * partitions. Only what was changed is sent. `done(description)` after the server
 * applied it. */
export function alterTopic({ stream, topic, options, done }) {
  const retention = limitChange('retention', 'Retention time', TIME_UNITS, 'days', options.retention_ms, fmt.millis)
  const retentionBytes = limitChange('retention-bytes', 'Retention size', SIZE_UNITS, 'GiB', options.retention_bytes, fmt.bytes)
  const durability = h('select', { name: 'durability' },
    h('option', { value: '' }, `keep (now ${options.durability})`),
    h('option', { value: 'always' }, 'always'),
    h('option', { value: 'interval' }, 'interval'),
    h('option', { value: 'never' }, 'never'))
  const interval = h('input', { name: 'interval', type: 'number', min: '1', step: '1', value: '1000' })
  const intervalField = field('Sync interval (ms)', interval)
  intervalField.hidden = true
  durability.addEventListener('change', () => {
    intervalField.hidden = durability.value !== 'interval'
  })
  const partitions = h('input', { name: 'partitions', type: 'number', min: String(options.partitions), max: '100000', step: '1', value: String(options.partitions), required: true })
  openDialog({
    title: `Change ${stream}/${topic}`,
    fields: [
      field('Retention time', retention.nodes, null, retention.mode),
      field('Retention size per partition', retentionBytes.nodes, null, retentionBytes.mode),
      field('Durability', durability),
      intervalField,
      field('Partitions', partitions, 'Partitions can only be added. Keyed records of a key may then go to another partition than before.'),
    ],
    submitLabel: 'Change topic',
    async submit() {
      const body = {}
      const ms = retention.change()
      if (ms !== undefined) body.retention_ms = ms
      const size = retentionBytes.change()
      if (size !== undefined) body.retention_bytes = size
      if (durability.value === 'interval') body.durability = `interval:${interval.value}`
      else if (durability.value) body.durability = durability.value
      if (Number(partitions.value) !== options.partitions) body.partitions = Number(partitions.value)
      if (Object.keys(body).length === 0) throw new FormProblem('Nothing is changed: pick what to change first.')
      done(await send('PATCH', topicPath(stream, topic), body))
    },
  })
}

/** The reset dialog of a group's or a named consumer's stored offsets. `kind` is
 * `group` or `consumer`; `members`, for a group, its live members (the server refuses
 * a reset while there are any). `done(offsets)` with the new stored offsets. */
export function resetOffsets({ kind, stream, topic, name, partitions, members = 0, done }) {
  const to = h('select', { name: 'to' },
    h('option', { value: 'first' }, 'the first record of each partition'),
    h('option', { value: 'end' }, 'the end (only records appended later are read)'),
    h('option', { value: 'offset' }, 'an offset'),
    h('option', { value: 'time' }, 'a time'))
  const offset = h('input', { name: 'offset', type: 'number', min: '0', step: '1' })
  const time = h('input', { name: 'time', type: 'datetime-local', step: '1' })
  const offsetField = field('Offset', offset)
  const timeField = field('Time (this browser\'s time zone)', time, 'The first record stamped at or after it.')
  offsetField.hidden = true
  timeField.hidden = true
  to.addEventListener('change', () => {
    offsetField.hidden = to.value !== 'offset'
    timeField.hidden = to.value !== 'time'
    offset.required = to.value === 'offset'
    time.required = to.value === 'time'
  })
  const partition = h('select', { name: 'partition' },
    h('option', { value: '' }, 'every partition'),
    partitions.map((p) => h('option', { value: String(p) }, `partition ${p}`)))
  const what = kind === 'group' ? `group ${name}` : `named consumer ${name}`
  const path = `${topicPath(stream, topic)}/${kind === 'group' ? 'groups' : 'consumers'}/${encodeURIComponent(name)}/reset`
  openDialog({
    title: `Reset the offsets of ${what}`,
    intro: kind === 'group' && members > 0
      ? `The group has ${members} live member${members === 1 ? '' : 's'}: the server refuses a reset until they have left.`
      : kind === 'consumer'
        ? 'Stop the consumer first: a running one stores its own offsets over the new ones.'
        : 'Members that join next start reading from the new offsets.',
    fields: [field('Move to', to), offsetField, timeField, field('Partitions', partition)],
    submitLabel: 'Reset offsets',
    danger: true,
    async submit() {
      const body = { to: to.value }
      if (to.value === 'offset') body.offset = Number(offset.value)
      if (to.value === 'time') body.time = new Date(time.value).toISOString()
      if (partition.value !== '') body.partition = Number(partition.value)
      const answer = await send('POST', path, body)
      done(answer.offsets)
    },
  })
}

/** The "delete a group" dialog: its stored offsets on the topic go. */
export function deleteGroup({ stream, topic, group, done }) {
  confirmByName({
    title: `Delete group ${group}?`,
    intro: `This deletes the stored offsets of the group ${group} on ${stream}/${topic}. The server refuses while the group has live members. A member that joins later starts where its start position says.`,
    name: group,
    submitLabel: 'Delete group',
    async action() {
      await send('DELETE', `${topicPath(stream, topic)}/groups/${encodeURIComponent(group)}`)
      done()
    },
  })
}

/** The "purge records" dialog: the records before a point go, exactly, in every
 * partition or one; confirmed by typing the topic's name. `done(partitions)` with each
 * purged partition's new first offset. */
export function purgeTopic({ stream, topic, partitions, done }) {
  const full = `${stream}/${topic}`
  const before = h('select', { name: 'before' },
    h('option', { value: 'offset' }, 'an offset (the record at it is the first left)'),
    h('option', { value: 'time' }, 'a time (older records go)'),
    h('option', { value: 'end' }, 'the end (every record goes)'))
  const offset = h('input', { name: 'offset', type: 'number', min: '0', step: '1', required: true })
  const time = h('input', { name: 'time', type: 'datetime-local', step: '1' })
  const offsetField = field('Offset', offset)
  const timeField = field('Time (this browser\'s time zone)', time, 'Records stamped before it go.')
  timeField.hidden = true
  before.addEventListener('change', () => {
    offsetField.hidden = before.value !== 'offset'
    timeField.hidden = before.value !== 'time'
    offset.required = before.value === 'offset'
    time.required = before.value === 'time'
  })
  const partition = h('select', { name: 'partition' },
    h('option', { value: '' }, 'every partition'),
    partitions.map((p) => h('option', { value: String(p) }, `partition ${p}`)))
  const confirm = h('input', { name: 'confirm', required: true, autocomplete: 'off', spellcheck: 'false' })
  openDialog({
    title: `Purge records of ${full}?`,
    intro: 'The records before the point are deleted for good; readers go on from the first record left.',
    fields: [
      field('Delete the records before', before),
      offsetField,
      timeField,
      field('Partitions', partition),
      field(`Type ${full} to confirm`, confirm),
    ],
    submitLabel: 'Purge records',
    danger: true,
    ready: (form, button) => {
      button.disabled = true
      confirm.addEventListener('input', () => { button.disabled = confirm.value !== full })
    },
    async submit() {
      if (confirm.value !== full) return false
      const body = { before: before.value }
      if (before.value === 'offset') body.offset = Number(offset.value)
      if (before.value === 'time') body.time = new Date(time.value).toISOString()
      if (partition.value !== '') body.partition = Number(partition.value)
      const answer = await send('POST', `${topicPath(stream, topic)}/purge`, body)
      done(answer.partitions)
    },
  })
}
