'use strict'
// Rill's Node.js SDK: the JavaScript half over the native addon (`rill.node`, built by
// `npm run build` from `src/*.rs`). It adds codecs, records as objects, async
// iteration, `AbortSignal`s, `Symbol.asyncDispose` and the error classes; everything
// else (routing, retries, idempotence, commit policies) is the Rust SDK's.

const path = require('node:path')

function loadNative() {
  try {
    return require(path.join(__dirname, 'rill.node'))
  } catch (e) {
    const err = new Error(
      `the Rill native addon (rill.node) could not be loaded: run \`npm run build\` in ${__dirname} (${e.message})`,
    )
    err.cause = e
    throw err
  }
}
const native = loadNative()
const MARKER = native.errorMarker()

// `await using` needs Symbol.asyncDispose (Node >= 20.4 has it; older Nodes get the
// well-known registered symbol, as the TypeScript helpers polyfill it).
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('Symbol.asyncDispose')

// ---- errors -----------------------------------------------------------------------

class RillError extends Error {
  constructor(message, info = {}) {
    super(message)
    this.name = new.target.name
    /** The protocol error code's name ("TOPIC_NOT_FOUND"), or null for a client error. */
    this.code = info.code ?? null
    /** The Rust `ClientError` variant ("Server", "InvalidArgument", ...). */
    this.kind = info.kind ?? 'Unknown'
    /** Whether the same call may succeed later. */
    this.transient = info.transient ?? false
    Object.assign(this, info.fields ?? {})
  }
}
class ServerError extends RillError {}

const KIND_CLASSES = {}
function kindClass(kind, name, base = RillError) {
  const cls = { [name]: class extends base {} }[name]
  KIND_CLASSES[kind] = cls
  return cls
}
const errors = {
  RillError,
  ServerError,
  DataLossError: kindClass('DataLoss', 'DataLossError', ServerError),
  ConnectionError: kindClass('Connection', 'ConnectionError'),
  IndeterminateError: kindClass('Indeterminate', 'IndeterminateError'),
  ProtocolError: kindClass('Protocol', 'ProtocolError'),
  InvalidUrlError: kindClass('InvalidUrl', 'InvalidUrlError'),
  InvalidArgumentError: kindClass('InvalidArgument', 'InvalidArgumentError'),
  EncodeError: kindClass('Encode', 'EncodeError'),
  DecodeError: kindClass('Decode', 'DecodeError'),
  MalformedBatchError: kindClass('InvalidBatch', 'MalformedBatchError'),
  CorruptError: kindClass('Corrupt', 'CorruptError'),
  TimeoutError: kindClass('Timeout', 'TimeoutError'),
  EmbeddedError: kindClass('Embedded', 'EmbeddedError'),
  ShutdownError: kindClass('Shutdown', 'ShutdownError'),
  ClosedError: kindClass('Closed', 'ClosedError'),
  PoisonedError: kindClass('Poisoned', 'PoisonedError'),
  BufferFullError: kindClass('BufferFull', 'BufferFullError'),
  EpochsExhaustedError: kindClass('EpochsExhausted', 'EpochsExhaustedError'),
  BackgroundError: kindClass('Background', 'BackgroundError'),
  PanicError: kindClass('Panic', 'PanicError'),
  AbortError: kindClass('Aborted', 'AbortError'),
}
// One class per protocol error code (docs/PROTOCOL.md §5), e.g. TOPIC_NOT_FOUND ->
// TopicNotFoundError; the code "TIMEOUT" is ServerTimeoutError (TimeoutError is the
// client's own).
const SERVER_CODES = [
  'UNSPECIFIED', 'INTERNAL', 'INVALID_REQUEST', 'UNKNOWN_KIND', 'UNSUPPORTED_VERSION',
  'FRAME_TOO_LARGE', 'INVALID_NAME', 'STREAM_NOT_FOUND', 'TOPIC_NOT_FOUND',
  'PARTITION_NOT_FOUND', 'STREAM_EXISTS', 'TOPIC_EXISTS', 'INVALID_BATCH', 'BATCH_TOO_LARGE',
  'RECORD_TOO_LARGE', 'OFFSET_BEFORE_START', 'OFFSET_BEYOND_END', 'OUT_OF_ORDER_SEQUENCE',
  'PRODUCER_FENCED', 'STORAGE_FAILURE', 'TIMEOUT', 'NOT_OWNER', 'REBALANCING', 'MIGRATING',
  'BUSY', 'INVALID_CONFIG', 'OFFSET_NOT_FOUND', 'SHUTTING_DOWN', 'GROUP_NOT_FOUND',
  'NOT_MEMBER', 'STALE_GENERATION', 'NOT_ASSIGNED', 'UNKNOWN_PRODUCER_ID',
  'TIMESTAMP_OUT_OF_RANGE', 'GROUP_NOT_EMPTY', 'NOT_LEADER', 'UNAUTHENTICATED',
  'PERMISSION_DENIED',
]
const SERVER_CLASSES = {}
for (const code of SERVER_CODES) {
  let name = code.toLowerCase().replace(/(^|_)([a-z])/g, (_, __, c) => c.toUpperCase()) + 'Error'
  if (code === 'TIMEOUT') name = 'ServerTimeoutError'
  const cls = { [name]: class extends ServerError {} }[name]
  SERVER_CLASSES[code] = cls
  errors[name] = cls
}
errors.UnknownCodeError = { UnknownCodeError: class extends ServerError {} }.UnknownCodeError

/** The error of a marked native reason, or null. */
function decodeReason(reason) {
  if (typeof reason !== 'string' || !reason.startsWith(MARKER)) return null
  let info
  try {
    info = JSON.parse(reason.slice(MARKER.length))
  } catch {
    return null
  }
  let cls
  if (info.kind === 'Server') cls = SERVER_CLASSES[info.code] ?? errors.UnknownCodeError
  else cls = KIND_CLASSES[info.kind] ?? RillError
  return new cls(info.message, info)
}

/** Every error out of the addon as a RillError: napi's own conversion errors (a value
 * of the wrong type) are InvalidArgumentErrors. */
function fromNative(e) {
  if (e instanceof RillError) return e
  const decoded = decodeReason(e && e.message)
  if (decoded) return decoded
  const err = new errors.InvalidArgumentError(String((e && e.message) || e), { kind: 'InvalidArgument' })
  err.cause = e
  return err
}

function invalid(message) {
  return new errors.InvalidArgumentError(message, { kind: 'InvalidArgument' })
}

/** Runs a native call, turning its errors (thrown or rejected) into RillErrors. */
async function call(f) {
  try {
    return await f()
  } catch (e) {
    throw fromNative(e)
  }
}
function callSync(f) {
  try {
    return f()
  } catch (e) {
    throw fromNative(e)
  }
}

/** A topic's description with an elastic topic's hash bounds as BigInts. */
function description(d) {
  for (const r of d.ranges) {
    r.lo = BigInt(r.lo)
    r.hi = BigInt(r.hi)
  }
  return d
}

// ---- input checks -------------------------------------------------------------------

function checkU32(what, v) {
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) {
    throw invalid(`${what} must be an integer in 0..=4294967295, not ${describe(v)}`)
  }
  return v
}
function checkOffset(what, v) {
  if (!Number.isSafeInteger(v) || v < 0) {
    throw invalid(`${what} must be a safe integer >= 0, not ${describe(v)}`)
  }
  return v
}
function checkString(what, v) {
  if (typeof v !== 'string') throw invalid(`${what} must be a string, not ${describe(v)}`)
  return v
}
function checkBool(what, v) {
  if (typeof v !== 'boolean') throw invalid(`${what} must be a boolean, not ${describe(v)}`)
  return v
}
function describe(v) {
  if (v === null) return 'null'
  if (typeof v === 'string') return JSON.stringify(v.length > 64 ? v.slice(0, 64) + '…' : v)
  if (typeof v === 'bigint') return `${v}n`
  if (typeof v === 'object') return v.constructor ? `a ${v.constructor.name}` : 'an object'
  return `${typeof v} ${String(v)}`
}
/** A Buffer over the bytes of `v` (no copy): a Uint8Array, a Buffer or a string
 * (UTF-8). */
function bytesOf(what, v) {
  if (Buffer.isBuffer(v)) return v
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength)
  if (typeof v === 'string') return Buffer.from(v, 'utf8')
  throw invalid(`${what} must be a Uint8Array or a string, not ${describe(v)}`)
}
/** Checks that `options` is a plain object naming only `known` options. */
function checkOptions(what, options, known) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw invalid(`${what} options must be an object, not ${describe(options)}`)
  }
  const unknown = Object.keys(options).filter((k) => options[k] !== undefined && !known.includes(k))
  if (unknown.length > 0) {
    throw invalid(`unknown ${what} option(s): ${unknown.join(', ')} (known: ${known.join(', ')})`)
  }
  return options
}
function optional(check, what, v) {
  return v === undefined || v === null ? undefined : check(what, v)
}

// ---- headers ------------------------------------------------------------------------

const INT_RANGES = {
  int8: [-(2n ** 7n), 2n ** 7n - 1n],
  int16: [-(2n ** 15n), 2n ** 15n - 1n],
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  int128: [-(2n ** 127n), 2n ** 127n - 1n],
  uint8: [0n, 2n ** 8n - 1n],
  uint16: [0n, 2n ** 16n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
  uint128: [0n, 2n ** 128n - 1n],
}
const SMALL_INTS = new Set(['int8', 'int16', 'int32', 'uint8', 'uint16', 'uint32'])

/** A typed header value: `HeaderValue.uint16(7)`. Plain strings, Uint8Arrays and
 * booleans are headers too; a number must say its type. */
class HeaderValue {
  constructor(type, value) {
    this.type = type
    this.value = value
    Object.freeze(this)
  }
  static str(v) { return new HeaderValue('str', checkString('a str header', v)) }
  static bytes(v) { return new HeaderValue('bytes', new Uint8Array(bytesOf('a bytes header', v))) }
  static bool(v) { return new HeaderValue('bool', checkBool('a bool header', v)) }
  static float32(v) { return new HeaderValue('float32', checkFloat(v)) }
  static float64(v) { return new HeaderValue('float64', checkFloat(v)) }
}
function checkFloat(v) {
  if (typeof v !== 'number') throw invalid(`a float header must be a number, not ${describe(v)}`)
  return v
}
for (const type of Object.keys(INT_RANGES)) {
  HeaderValue[type] = (v) => {
    const [lo, hi] = INT_RANGES[type]
    let n
    if (typeof v === 'bigint') n = v
    else if (Number.isSafeInteger(v)) n = BigInt(v)
    else throw invalid(`a ${type} header must be an integer (number or bigint), not ${describe(v)}`)
    if (n < lo || n > hi) throw invalid(`${n} is out of range for a ${type} header (${lo}..=${hi})`)
    return new HeaderValue(type, SMALL_INTS.has(type) ? Number(n) : n)
  }
}

function headerIn(name, v) {
  checkString('a header name', name)
  let hv = v
  if (!(v instanceof HeaderValue)) {
    if (typeof v === 'string') hv = HeaderValue.str(v)
    else if (typeof v === 'boolean') hv = HeaderValue.bool(v)
    else if (v instanceof Uint8Array) hv = HeaderValue.bytes(v)
    else if (typeof v === 'number' || typeof v === 'bigint') {
      throw invalid(`header ${JSON.stringify(name)}: a number needs its type, as HeaderValue.int64(${v}) or HeaderValue.float64(${v})`)
    } else throw invalid(`header ${JSON.stringify(name)}: ${describe(v)} is not a header value`)
  }
  const h = { name, kind: hv.type }
  switch (hv.type) {
    case 'str': h.text = hv.value; break
    case 'bytes': h.bytes = bytesOf('a bytes header', hv.value); break
    case 'bool': h.flag = hv.value; break
    case 'float32': case 'float64': h.number = hv.value; break
    default: h.text = String(hv.value)
  }
  return h
}
/** Headers from an object `{name: value}`, a Map, or an array of [name, value] pairs. */
function headersIn(headers) {
  if (headers === undefined || headers === null) return undefined
  let pairs
  if (Array.isArray(headers)) pairs = headers
  else if (headers instanceof Map) pairs = [...headers.entries()]
  else if (typeof headers === 'object') pairs = Object.entries(headers)
  else throw invalid(`headers must be an object, a Map or [name, value] pairs, not ${describe(headers)}`)
  return pairs.map((pair) => {
    if (!Array.isArray(pair) || pair.length !== 2) throw invalid('headers as an array are [name, value] pairs')
    return headerIn(pair[0], pair[1])
  })
}
function headerOut(h) {
  switch (h.kind) {
    case 'str': return new HeaderValue('str', h.text)
    case 'bytes': return new HeaderValue('bytes', new Uint8Array(h.bytes))
    case 'bool': return new HeaderValue('bool', h.flag)
    case 'float32': case 'float64': return new HeaderValue(h.kind, h.number)
    default: return new HeaderValue(h.kind, SMALL_INTS.has(h.kind) ? Number(h.text) : BigInt(h.text))
  }
}

// ---- codecs -------------------------------------------------------------------------

const encoder = new TextEncoder()
const decoder = new TextDecoder('utf-8', { fatal: true })
/** UTF-8 bytes of a string. */
function utf8(s) { return encoder.encode(checkString('utf8()', s)) }
/** Plain JSON, as the Rust SDK's `Json` codec writes it. */
const JSON_CODEC = Object.freeze({
  encode(value) {
    const text = JSON.stringify(value)
    if (text === undefined) throw new errors.EncodeError(`${describe(value)} has no JSON form`, { kind: 'Encode' })
    return encoder.encode(text)
  },
  decode(bytes) { return JSON.parse(decoder.decode(bytes)) },
})
/** Raw bytes, as stored. */
const BYTES_CODEC = Object.freeze({ encode: (v) => bytesOf('a value', v), decode: (b) => b })
function checkCodec(codec) {
  if (!codec || typeof codec.encode !== 'function' || typeof codec.decode !== 'function') {
    throw invalid('a codec is an object with encode(value) and decode(bytes)')
  }
  return codec
}
function encodeWith(codec, value) {
  let out
  try {
    out = codec.encode(value)
  } catch (e) {
    if (e instanceof RillError) throw e
    const err = new errors.EncodeError(`the codec could not encode the value: ${e && e.message}`, { kind: 'Encode' })
    err.cause = e
    throw err
  }
  if (!(out instanceof Uint8Array)) throw new errors.EncodeError('a codec must encode to a Uint8Array', { kind: 'Encode' })
  return bytesOf('an encoded value', out)
}

// ---- records ------------------------------------------------------------------------

/** A record as the SDK hands it out. */
class RillRecord {
  constructor(partition, offset, timestampUs, key, headers, value) {
    this.partition = partition
    this.offset = offset
    this.timestampUs = timestampUs
    this.key = key
    this.headers = headers
    this.value = value
  }
  /** The value of the first header named `name`. */
  header(name) {
    const found = this.headers.find(([n]) => n === name)
    return found ? found[1] : undefined
  }
}
/** `record` with its value decoded by `codec` (a DecodeError naming it if it fails). */
function decoded(record, codec) {
  if (codec && codec !== BYTES_CODEC) {
    try {
      record.value = codec.decode(record.value)
    } catch (e) {
      const { partition, offset } = record
      const err = new errors.DecodeError(
        `record at partition ${partition} offset ${offset} could not be decoded: ${e && e.message}`,
        { kind: 'Decode', fields: { partition, offset, reason: String(e && e.message) } },
      )
      err.cause = e
      throw err
    }
  }
  return record
}
/** A record from the addon's `RecordOut`. */
function recordOut(r, codec) {
  const raw = new Uint8Array(r.value.buffer, r.value.byteOffset, r.value.byteLength)
  const key = r.key ? new Uint8Array(r.key.buffer, r.key.byteOffset, r.key.byteLength) : null
  const headers = r.headers.map((h) => [h.name, headerOut(h)])
  return decoded(new RillRecord(r.partition, r.offset, r.timestampUs, key, headers, raw), codec)
}
/** The poll results of the addon's `PackedRecords`: views into its buffers. */
function unpackRecords(p, codec, results) {
  const { values, keys, valueLengths, keyLengths, headerIndexes } = p
  let at = values.byteOffset
  let keyAt = keys.byteOffset
  let h = 0
  for (let i = 0; i < valueLengths.length; i++) {
    const value = new Uint8Array(values.buffer, at, valueLengths[i])
    at += valueLengths[i]
    let key = null
    if (keyLengths[i] >= 0) {
      key = new Uint8Array(keys.buffer, keyAt, keyLengths[i])
      keyAt += keyLengths[i]
    }
    let headers = []
    if (h < headerIndexes.length && headerIndexes[h] === i) {
      headers = p.headers[h].map((x) => [x.name, headerOut(x)])
      h += 1
    }
    const record = new RillRecord(p.partitions[i], p.offsets[i], p.timestampsUs[i], key, headers, value)
    try {
      results.push({ kind: 'record', record: decoded(record, codec) })
    } catch (e) {
      results.push({ kind: 'error', error: e })
    }
  }
  return results
}

// ---- abort signals ------------------------------------------------------------------

/** Runs `f(canceller)`, firing the canceller when `signal` aborts. */
async function withSignal(signal, f) {
  if (signal === undefined || signal === null) return call(() => f(undefined))
  if (typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function') {
    throw invalid('signal must be an AbortSignal')
  }
  if (signal.aborted) throw new errors.AbortError('the operation was aborted', { kind: 'Aborted' })
  const canceller = new native.Canceller()
  const onAbort = () => canceller.cancel()
  signal.addEventListener('abort', onAbort, { once: true })
  try {
    return await call(() => f(canceller))
  } finally {
    signal.removeEventListener('abort', onAbort)
  }
}
function waitOptions(options) {
  const o = checkOptions('wait', options, ['signal'])
  const signal = o.signal
  if (signal !== undefined && signal !== null &&
    (typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function')) {
    throw invalid('signal must be an AbortSignal')
  }
  return signal
}

// ---- client -------------------------------------------------------------------------

const CLIENT_OPTIONS = ['defaultStream', 'connectTimeoutMs', 'initRetries', 'initIntervalMs', 'retries',
  'backoffMs', 'backoffMaxMs', 'user', 'password', 'token', 'tlsCaFile', 'tlsCertFile', 'tlsKeyFile']
const OPEN_OPTIONS = ['defaultStream', 'retries', 'backoffMs', 'backoffMaxMs']

function clientOptions(what, options, known) {
  const o = checkOptions(what, options, known)
  const out = {}
  for (const k of known) {
    const v = o[k]
    if (v === undefined || v === null) continue
    out[k] = ['defaultStream', 'user', 'password', 'token', 'tlsCaFile', 'tlsCertFile', 'tlsKeyFile'].includes(k)
      ? checkString(k, v) : checkU32(k, v)
  }
  return out
}

class Rill {
  #native
  /** @internal */
  constructor(nativeClient) {
    if (!nativeClient || !(nativeClient instanceof native.NativeClient)) {
      throw invalid('use Rill.connect(url) or Rill.open(dir)')
    }
    this.#native = nativeClient
  }
  /** Connects to `rill://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]` or `rills://...`. */
  static async connect(url, options) {
    checkString('url', url)
    const o = clientOptions('connect', options, CLIENT_OPTIONS)
    return new Rill(await call(() => native.connect(url, o)))
  }
  /** Opens a data directory with an in-process broker: the same API, no server. */
  static async open(dir, options) {
    checkString('dir', dir)
    const o = clientOptions('open', options, OPEN_OPTIONS)
    return new Rill(await call(() => native.open(dir, o)))
  }
  /** A stream handle. */
  stream(name) {
    return new Stream(this, this.#native, checkString('a stream name', name))
  }
  /** A topic of the default stream. */
  topic(name) {
    return this.stream(this.#native.defaultStream).topic(name)
  }
  get defaultStream() { return this.#native.defaultStream }
  get isEmbedded() { return this.#native.isEmbedded }
  get isClosed() { return this.#native.isClosed }
  async createStream(name, { ifMissing = false } = {}) {
    return call(() => this.#native.createStream(checkString('a stream name', name), checkBool('ifMissing', ifMissing)))
  }
  async deleteStream(name) { return call(() => this.#native.deleteStream(checkString('a stream name', name))) }
  async listStreams() { return JSON.parse(await call(() => this.#native.listStreams())) }
  async listTopics(stream) {
    return JSON.parse(await call(() => this.#native.listTopics(optional(checkString, 'a stream name', stream))))
  }
  async describeTopic(stream, topic) {
    return description(JSON.parse(await call(() => this.#native.describeTopic(checkString('a stream name', stream), checkString('a topic name', topic)))))
  }
  /** Closes the connection or the embedded broker; later calls fail with ClosedError. */
  async close() { return call(() => this.#native.close()) }
  async [asyncDispose]() { await this.close() }
}

class Stream {
  #client
  #native
  constructor(client, nativeClient, name) {
    this.#client = client
    this.#native = nativeClient
    this.name = name
  }
  topic(name) {
    return new Topic(callSync(() => this.#native.topic(this.name, checkString('a topic name', name))), BYTES_CODEC)
  }
  async ensure() { return this.#client.createStream(this.name, { ifMissing: true }) }
  async create() { return this.#client.createStream(this.name, { ifMissing: false }) }
  async delete() { return this.#client.deleteStream(this.name) }
  async topics() { return this.#client.listTopics(this.name) }
}

// ---- topics -------------------------------------------------------------------------

function messageIn(value, options, codec, allowPartition) {
  const o = checkOptions('message', options, allowPartition ? ['key', 'headers', 'partition'] : ['key', 'headers'])
  const m = { value: encodeWith(codec, value) }
  if (o.key !== undefined && o.key !== null) m.key = bytesOf('a key', o.key)
  const headers = headersIn(o.headers)
  if (headers) m.headers = headers
  const partition = optional(checkU32, 'partition', o.partition)
  if (partition !== undefined && m.key !== undefined) {
    throw invalid('a message goes by its key or to a partition, not both')
  }
  return [m, partition]
}

const NO_BYTES = Buffer.alloc(0)

/** A batch as `sendPacked`/`publishPacked` take it when no message has headers: every
 * value in one buffer with their lengths, every key in another (-1: none). One native
 * argument per batch instead of an object per message. `null` when one has headers. */
function packMessages(what, messages, codec) {
  if (!Array.isArray(messages)) throw invalid(`${what} takes an array of {value, key?, headers?}`)
  const n = messages.length
  const values = new Array(n)
  const valueLengths = new Uint32Array(n)
  let keys = null
  let keyLengths = null
  for (let i = 0; i < n; i++) {
    const m = messages[i]
    if (!m || typeof m !== 'object') throw invalid('a message is {value, key?, headers?}')
    if (m.headers !== undefined && m.headers !== null) return null
    const v = encodeWith(codec, m.value)
    values[i] = v
    valueLengths[i] = v.length
    if (m.key !== undefined && m.key !== null) {
      if (keys === null) {
        keys = new Array(n).fill(NO_BYTES)
        keyLengths = new Int32Array(n).fill(-1)
      }
      const k = bytesOf('a key', m.key)
      keys[i] = k
      keyLengths[i] = k.length
    }
  }
  return [Buffer.concat(values), valueLengths, keys && Buffer.concat(keys), keyLengths ?? undefined]
}

/** Positions from `packed_positions`: `{partition, offset}` objects made here. */
function unpackPositions(packed) {
  const { partitions, offsets } = packed
  const out = new Array(partitions.length)
  for (let i = 0; i < out.length; i++) out[i] = { partition: partitions[i], offset: offsets[i] }
  return out
}

class Topic {
  #native
  #codec
  constructor(nativeTopic, codec) {
    this.#native = nativeTopic
    this.#codec = codec
  }
  get stream() { return this.#native.stream }
  get name() { return this.#native.name }
  get codec() { return this.#codec }
  /** The same topic with values encoded and decoded by `codec`. */
  typed(codec) { return new Topic(this.#native, checkCodec(codec)) }
  /** The same topic with JSON values (or those of `codec`). */
  json(codec) { return this.typed(codec === undefined ? JSON_CODEC : codec) }
  /** The same topic with raw byte values. */
  bytes() { return new Topic(this.#native, BYTES_CODEC) }

  async ensure(partitions) {
    return JSON.parse(await call(() => this.#native.ensure(checkU32('partitions', partitions))))
  }
  async create(options) {
    const o = checkOptions('topic', options, ['partitions', 'retentionMs', 'retentionBytes', 'segmentBytes',
      'durability', 'maxRecordBytes', 'replicas', 'ifMissing', 'elastic', 'autoSplit'])
    const n = {}
    for (const k of ['partitions', 'maxRecordBytes', 'replicas']) if (o[k] != null) n[k] = checkU32(k, o[k])
    for (const k of ['retentionMs', 'retentionBytes', 'segmentBytes']) if (o[k] != null) n[k] = checkOffset(k, o[k])
    if (o.durability != null) n.durability = checkString('durability', o.durability)
    if (o.ifMissing != null) n.ifMissing = checkBool('ifMissing', o.ifMissing)
    if (o.elastic != null) n.elastic = checkBool('elastic', o.elastic)
    if (o.autoSplit != null) {
      const a = checkOptions('autoSplit', o.autoSplit, ['bytesPerS', 'windowMs', 'cooldownMs'])
      n.autoSplit = checkOffset('autoSplit.bytesPerS', a.bytesPerS)
      if (a.windowMs != null) n.autoSplitWindowMs = checkOffset('autoSplit.windowMs', a.windowMs)
      if (a.cooldownMs != null) n.autoSplitCooldownMs = checkOffset('autoSplit.cooldownMs', a.cooldownMs)
    }
    return JSON.parse(await call(() => this.#native.create(n)))
  }
  async delete() { return call(() => this.#native.delete()) }
  async describe() { return description(JSON.parse(await call(() => this.#native.describe()))) }
  /** Splits an open range of an elastic topic: `range` (default: the busiest) at routing
   * hash `at` (a bigint or a safe integer; default: its middle). */
  async splitRange({ range, at } = {}) {
    let hash
    if (at != null) {
      if (typeof at === 'bigint' && at >= 0n && at < 2n ** 64n) hash = at.toString()
      else if (Number.isSafeInteger(at) && at >= 0) hash = String(at)
      else throw invalid(`at must be a 64-bit hash (a bigint or a safe integer), not ${describe(at)}`)
    }
    const r = range == null ? undefined : checkU32('range', range)
    return JSON.parse(await call(() => this.#native.splitRange(r, hash)))
  }
  /** Merges two neighbouring open ranges of an elastic topic into one. */
  async mergeRanges(first, second) {
    return JSON.parse(await call(() => this.#native.mergeRanges(checkU32('first', first), checkU32('second', second))))
  }
  async partitions() { return call(() => this.#native.partitions()) }
  async firstOffset(partition) { return call(() => this.#native.firstOffset(checkU32('partition', partition))) }
  async endOffset(partition) { return call(() => this.#native.endOffset(checkU32('partition', partition))) }
  async offsetForTime(partition, timestampUs) {
    if (!Number.isSafeInteger(timestampUs)) throw invalid(`timestampUs must be a safe integer, not ${describe(timestampUs)}`)
    return call(() => this.#native.offsetForTime(checkU32('partition', partition), timestampUs))
  }
  /** A one-record publish: `.value(v)` (or `.json(v)`, `.bytes(b)`), `.key(k)` or
   * `.partition(n)`, `.header(name, value)`, then `await .send()`. */
  publish() { return new Publish(this.#native, this.#codec) }
  /** Publishes many `{value, key?, headers?}` messages in one call. */
  async publishBatch(messages) {
    const packed = packMessages('publishBatch', messages, this.#codec)
    if (packed) return unpackPositions(await call(() => this.#native.publishPacked(...packed)))
    const ms = messages.map((m) => {
      if (!m || typeof m !== 'object') throw invalid('a message is {value, key?, headers?}')
      return messageIn(m.value, { key: m.key, headers: m.headers }, this.#codec, false)[0]
    })
    return call(() => this.#native.publishBatch(ms))
  }
  /** A cursor reader named `name`, from saved `offsets` (the beginning without). */
  records(name, options) {
    checkString('a reader name', name)
    const o = checkOptions('reader', options, ['offsets', 'maxBytes', 'maxResults'])
    let offsets
    if (o.offsets != null) {
      const entries = o.offsets instanceof Map ? [...o.offsets.entries()] : Object.entries(o.offsets)
      offsets = entries.map(([p, off]) => [checkU32('a partition', Number(p)), checkOffset('an offset', off)])
    }
    const maxBytes = optional(checkU32, 'maxBytes', o.maxBytes)
    const maxResults = optional(checkU32, 'maxResults', o.maxResults) ?? 10_000
    return new Reader(callSync(() => this.#native.records(name, offsets, maxBytes)), this.#codec, maxResults)
  }
  /** A producer (built on first use; errors of building surface on the first send). */
  producer(options) { return new Producer(this.#native, producerOptions(options), this.#codec) }
  /** A named consumer of one partition; the broker keeps its position. */
  async consumer(name, partition, options) {
    checkString('a consumer name', name)
    checkU32('partition', partition)
    const o = consumerOptions('consumer', options, ['maxBytes'])
    const n = { common: o.common }
    if (o.rest.maxBytes != null) n.maxBytes = checkU32('maxBytes', o.rest.maxBytes)
    return new Consumer(await call(() => this.#native.consumer(name, partition, n)), this.#codec)
  }
  /** Joins consumer group `group` (creating it unless `createGroup: false`). */
  async consumerGroup(group, options) {
    checkString('a group name', group)
    const o = consumerOptions('consumer group', options, ['memberId', 'sessionTimeoutMs', 'createGroup'])
    const n = { common: o.common }
    if (o.rest.memberId != null) n.memberId = checkString('memberId', o.rest.memberId)
    if (o.rest.sessionTimeoutMs != null) n.sessionTimeoutMs = checkU32('sessionTimeoutMs', o.rest.sessionTimeoutMs)
    if (o.rest.createGroup != null) n.createGroup = checkBool('createGroup', o.rest.createGroup)
    return new GroupConsumer(await call(() => this.#native.consumerGroup(group, n)), this.#codec)
  }
  async storedOffset(name, partition) {
    return call(() => this.#native.storedOffset(checkString('a consumer name', name), checkU32('partition', partition)))
  }
  async storeOffset(name, partition, offset) {
    return call(() => this.#native.storeOffset(checkString('a consumer name', name), checkU32('partition', partition), checkOffset('offset', offset)))
  }
  async describeGroup(group) { return JSON.parse(await call(() => this.#native.describeGroup(checkString('a group name', group)))) }
  async deleteGroupOffset(group, partition) {
    return call(() => this.#native.deleteGroupOffset(checkString('a group name', group), checkU32('partition', partition)))
  }
}

class Publish {
  #native
  #codec
  #value
  #hasValue = false
  #key
  #partition
  #headers = []
  constructor(nativeTopic, codec) {
    this.#native = nativeTopic
    this.#codec = codec
  }
  /** The value, encoded by the topic's codec. */
  value(v) { this.#value = encodeWith(this.#codec, v); this.#hasValue = true; return this }
  /** The value as JSON (whatever the topic's codec). */
  json(v) { this.#value = encodeWith(JSON_CODEC, v); this.#hasValue = true; return this }
  /** The value as raw bytes (a string is UTF-8). */
  bytes(v) { this.#value = bytesOf('a value', v); this.#hasValue = true; return this }
  key(k) { this.#key = bytesOf('a key', k); return this }
  partition(n) { this.#partition = checkU32('partition', n); return this }
  header(name, value) { this.#headers.push(headerIn(name, value)); return this }
  /** Sends it: one round trip; the record's `{partition, offset}`. */
  async send() {
    if (!this.#hasValue) throw invalid('publish() needs a value: .value(v), .json(v) or .bytes(b)')
    const m = { value: this.#value, headers: this.#headers }
    if (this.#key !== undefined) m.key = this.#key
    return call(() => this.#native.publish(m, this.#partition))
  }
}

class Reader {
  #native
  #codec
  #maxResults
  constructor(nativeReader, codec, maxResults) {
    this.#native = nativeReader
    this.#codec = codec
    this.#maxResults = maxResults
  }
  get name() { return this.#native.name }
  /** What is there now: `{kind: "record", record}` or `{kind: "error", error}` results
   * (an error names records that cannot be delivered; reading goes on after them).
   * An empty array once caught up with the tails it saw. */
  async poll() {
    const out = await call(() => this.#native.poll(this.#maxResults))
    const results = []
    if (out.error != null) results.push({ kind: 'error', error: fromNative({ message: out.error }) })
    return unpackRecords(out.records, this.#codec, results)
  }
  /** Per partition, the next offset after the records handed out: `{partition: offset}`. */
  offsets() {
    return Object.fromEntries(callSync(() => this.#native.offsets()))
  }
  /** Records until caught up (an undeliverable record throws; iterate again to go on). */
  async *[Symbol.asyncIterator]() {
    for (;;) {
      const batch = await this.poll()
      if (batch.length === 0) return
      for (const r of batch) {
        if (r.kind === 'error') throw r.error
        yield r.record
      }
    }
  }
}

// ---- producer -----------------------------------------------------------------------

const PRODUCER_OPTIONS = ['batchLength', 'lingerMs', 'maxBatchBytes', 'retries', 'retryIntervalMs', 'maxInFlight',
  'idempotence', 'key', 'partition', 'background', 'shards', 'sharding', 'bufferMessages', 'backpressure',
  'backpressureTimeoutMs']
function producerOptions(options) {
  const o = checkOptions('producer', options, PRODUCER_OPTIONS)
  const n = {}
  for (const k of ['batchLength', 'lingerMs', 'maxBatchBytes', 'retries', 'retryIntervalMs', 'maxInFlight',
    'partition', 'shards', 'bufferMessages', 'backpressureTimeoutMs']) {
    if (o[k] != null) n[k] = checkU32(k, o[k])
  }
  for (const k of ['idempotence', 'background']) if (o[k] != null) n[k] = checkBool(k, o[k])
  for (const k of ['sharding', 'backpressure']) if (o[k] != null) n[k] = checkString(k, o[k])
  if (o.key != null) n.key = bytesOf('key', o.key)
  return n
}

class Producer {
  #ready
  #codec
  constructor(nativeTopic, options, codec) {
    this.#codec = codec
    this.#ready = call(() => nativeTopic.producer(options))
    // A failed build is reported by the first call that needs the producer.
    this.#ready.catch(() => {})
  }
  /** Sends one message; `{partition, offset}` in direct mode, null in background mode. */
  async send(value, options) {
    const [m, partition] = messageIn(value, options, this.#codec, true)
    const p = await this.#ready
    return call(() => p.send(m, partition))
  }
  /** Sends many `{value, key?, headers?}` messages, each checked before any is sent. */
  async sendBatch(messages) {
    const packed = packMessages('sendBatch', messages, this.#codec)
    if (packed) {
      const p = await this.#ready
      return unpackPositions(await call(() => p.sendPacked(...packed)))
    }
    const ms = messages.map((m) => {
      if (!m || typeof m !== 'object') throw invalid('a message is {value, key?, headers?}')
      return messageIn(m.value, { key: m.key, headers: m.headers }, this.#codec, false)[0]
    })
    const p = await this.#ready
    return call(() => p.sendBatch(ms))
  }
  async flush() { const p = await this.#ready; return call(() => p.flush()) }
  /** Flushes everything buffered and stops; later sends fail with ShutdownError. */
  async shutdown() {
    let p
    try {
      p = await this.#ready
    } catch {
      return
    }
    return call(() => p.shutdown())
  }
  async [asyncDispose]() { await this.shutdown() }
}

// ---- consumers ----------------------------------------------------------------------

const COMMON_OPTIONS = ['batchLength', 'pollIntervalMs', 'startFrom', 'allowReplay', 'autoCommit', 'commitPolicy',
  'maxWaitMs', 'pollingRetryIntervalMs']
const POLICY_KINDS = ['disabled', 'interval', 'polling', 'intervalOrPolling', 'all', 'intervalOrAll', 'each',
  'intervalOrEach', 'every', 'intervalOrEvery']

function consumerOptions(what, options, extra) {
  const o = checkOptions(what, options, [...COMMON_OPTIONS, ...extra])
  const c = {}
  for (const k of ['batchLength', 'pollIntervalMs', 'maxWaitMs', 'pollingRetryIntervalMs']) {
    if (o[k] != null) c[k] = checkU32(k, o[k])
  }
  if (o.allowReplay != null) c.allowReplay = checkBool('allowReplay', o.allowReplay)
  if (o.startFrom != null) {
    const s = checkOptions('startFrom', o.startFrom, ['kind', 'offset', 'timestampMicros'])
    c.startKind = checkString('startFrom.kind', s.kind)
    if (s.offset != null) c.startOffset = checkOffset('startFrom.offset', s.offset)
    if (s.timestampMicros != null) {
      if (!Number.isSafeInteger(s.timestampMicros)) throw invalid('startFrom.timestampMicros must be a safe integer')
      c.startTimestampMicros = s.timestampMicros
    }
  }
  if (o.autoCommit != null && o.commitPolicy != null) throw invalid('give autoCommit or commitPolicy, not both')
  if (o.autoCommit != null) {
    // false: the caller commits after handling (CommitPolicy::Disabled); true: the default.
    if (!checkBool('autoCommit', o.autoCommit)) c.commitPolicy = 'disabled'
  }
  if (o.commitPolicy != null) {
    const p = typeof o.commitPolicy === 'string' ? { kind: o.commitPolicy }
      : checkOptions('commitPolicy', o.commitPolicy, ['kind', 'intervalMs', 'every'])
    checkString('commitPolicy.kind', p.kind)
    if (!POLICY_KINDS.includes(p.kind)) throw invalid(`commitPolicy kind ${JSON.stringify(p.kind)}: expected one of ${POLICY_KINDS.join(', ')}`)
    c.commitPolicy = p.kind
    if (p.intervalMs != null) c.commitIntervalMs = checkU32('commitPolicy.intervalMs', p.intervalMs)
    if (p.every != null) c.commitEvery = checkU32('commitPolicy.every', p.every)
  }
  const rest = {}
  for (const k of extra) rest[k] = o[k]
  return { common: c, rest }
}

function positionOf(what) {
  if (!what || typeof what !== 'object') throw invalid('commit takes a record or {partition, offset}')
  return [checkU32('partition', what.partition), checkOffset('offset', what.offset)]
}

class BaseConsumer {
  _native
  #codec
  constructor(nativeConsumer, codec) {
    this._native = nativeConsumer
    this.#codec = codec
  }
  /** The next record, waiting for one; null after shutdown(). */
  async next(options) {
    const signal = waitOptions(options)
    // A record fetched already, with nothing to store first, comes without a promise
    // of the native side's.
    const ready = signal?.aborted ? null : this._native.tryNext()
    if (ready != null) return recordOut(ready, this.#codec)
    const r = await withSignal(signal, (c) => this._native.next(c))
    return r == null ? null : recordOut(r, this.#codec)
  }
  /** Like next(), but throws TimeoutError after `timeoutMs` and ShutdownError after
   * shutdown(). */
  async nextWithin(timeoutMs, options) {
    checkU32('timeoutMs', timeoutMs)
    const signal = waitOptions(options)
    const ready = signal?.aborted ? null : this._native.tryNext()
    if (ready != null) return recordOut(ready, this.#codec)
    const r = await withSignal(signal, (c) => this._native.nextWithin(timeoutMs, c))
    return recordOut(r, this.#codec)
  }
  /** Up to `maxResults` (10,000) records at once, as `{kind: "record", record}` or
   * `{kind: "error", error}` results (a value that failed to decode): what was fetched
   * already, else it waits for the next fetch (for `timeoutMs` at most, then `[]`;
   * without it as long as next() does). `[]` after shutdown(). Asking for the next poll
   * (or record) says the caller is done with every record of the poll before: the
   * commit policy may store them then, never a record of a poll before the next call. */
  async poll(options) {
    const o = checkOptions('poll', options, ['maxResults', 'timeoutMs', 'signal'])
    const max = o.maxResults == null ? 10_000 : checkU32('maxResults', o.maxResults)
    if (max < 1) throw invalid('maxResults must be at least 1')
    const timeoutMs = o.timeoutMs == null ? null : checkU32('timeoutMs', o.timeoutMs)
    const signal = waitOptions({ signal: o.signal })
    const results = []
    if (!signal?.aborted) {
      const packed = this._native.tryTake(max)
      if (packed.partitions.length > 0) return unpackRecords(packed, this.#codec, results)
    }
    let first
    try {
      first = await withSignal(signal, (c) => timeoutMs == null
        ? this._native.next(c)
        : this._native.nextWithin(timeoutMs, c))
    } catch (e) {
      if (timeoutMs != null && (e instanceof errors.TimeoutError || e instanceof errors.ShutdownError)) return results
      throw e
    }
    if (first == null) return results
    try {
      results.push({ kind: 'record', record: recordOut(first, this.#codec) })
    } catch (e) {
      results.push({ kind: 'error', error: e })
    }
    if (max > 1) unpackRecords(this._native.tryTake(max - 1), this.#codec, results)
    return results
  }
  /** Stores `record` (or `{partition, offset}`) as consumed: after handling it. */
  async commit(record) {
    const [p, o] = positionOf(record)
    return call(() => this._native.commit(p, o))
  }
  /** Stores the record at `offset` of `partition` as consumed. */
  async storeOffset(partition, offset) { return this.commit({ partition, offset }) }
  async deleteOffset(partition) { return call(() => this._native.deleteOffset(checkU32('partition', partition))) }
  lastConsumedOffset(partition) { return callSync(() => this._native.lastConsumedOffset(checkU32('partition', partition))) }
  lastStoredOffset(partition) { return callSync(() => this._native.lastStoredOffset(checkU32('partition', partition))) }
  /** Stops polling, stores final offsets as the policy says (a group member leaves). */
  async shutdown() { return call(() => this._native.shutdown()) }
  async [asyncDispose]() { await this.shutdown() }
  async *[Symbol.asyncIterator]() {
    for (;;) {
      const r = await this.next()
      if (r === null) return
      yield r
    }
  }
}

class Consumer extends BaseConsumer {
  get partition() { return this._native.partition }
}
class GroupConsumer extends BaseConsumer {
  get group() { return this._native.group }
  get memberId() { return this._native.memberId }
  assignment() { return this._native.assignment() }
  position(partition) { return callSync(() => this._native.position(checkU32('partition', partition))) }
}

/** The partition of `key` among `partitions`, as every SDK computes it. */
function partitionForKey(key, partitions) {
  return callSync(() => native.partitionForKey(bytesOf('a key', key), checkU32('partitions', partitions)))
}
/** Why `name` breaks the naming rule, or null. */
function nameProblem(name) { return native.nameProblem(checkString('a name', name)) ?? null }

module.exports = {
  Rill,
  Stream,
  Topic,
  Publish,
  Reader,
  Producer,
  Consumer,
  GroupConsumer,
  HeaderValue,
  JSON_CODEC,
  BYTES_CODEC,
  utf8,
  partitionForKey,
  nameProblem,
  NAME_LEN_MAX: native.nameLenMax(),
  VERSION: native.version(),
  errors,
  ...errors,
}
