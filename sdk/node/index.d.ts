// Types of Rill's Node.js SDK (hand-written; the addon's own are in native.d.ts).

export type Bytes = Uint8Array
export type BytesLike = Uint8Array | string

export interface Codec<T> {
  encode(value: T): Uint8Array
  decode(bytes: Uint8Array): T
}
export declare const JSON_CODEC: Codec<any>
export declare const BYTES_CODEC: Codec<Uint8Array>
export declare function utf8(s: string): Uint8Array
export declare function partitionForKey(key: BytesLike, partitions: number): number
export declare function nameProblem(name: string): string | null
export declare const NAME_LEN_MAX: number
export declare const VERSION: string

export type HeaderType =
  | 'str' | 'bytes' | 'bool' | 'int8' | 'int16' | 'int32' | 'int64' | 'int128'
  | 'uint8' | 'uint16' | 'uint32' | 'uint64' | 'uint128' | 'float32' | 'float64'
export declare class HeaderValue {
  readonly type: HeaderType
  /** number for floats and ints up to 32 bits, bigint for 64/128 bits. */
  readonly value: string | Uint8Array | boolean | number | bigint
  static str(v: string): HeaderValue
  static bytes(v: BytesLike): HeaderValue
  static bool(v: boolean): HeaderValue
  static int8(v: number | bigint): HeaderValue
  static int16(v: number | bigint): HeaderValue
  static int32(v: number | bigint): HeaderValue
  static int64(v: number | bigint): HeaderValue
  static int128(v: number | bigint): HeaderValue
  static uint8(v: number | bigint): HeaderValue
  static uint16(v: number | bigint): HeaderValue
  static uint32(v: number | bigint): HeaderValue
  static uint64(v: number | bigint): HeaderValue
  static uint128(v: number | bigint): HeaderValue
  static float32(v: number): HeaderValue
  static float64(v: number): HeaderValue
}
/** A header given as a typed value, or a plain string, Uint8Array or boolean. */
export type HeaderInput = HeaderValue | string | Uint8Array | boolean
export type Headers = Record<string, HeaderInput> | Map<string, HeaderInput> | Array<[string, HeaderInput]>

export interface Position { partition: number; offset: number }
export interface RillRecord<T = Uint8Array> {
  partition: number
  offset: number
  timestampUs: number
  key: Uint8Array | null
  headers: Array<[string, HeaderValue]>
  value: T
  header(name: string): HeaderValue | undefined
}
export type PollResult<T> = { kind: 'record'; record: RillRecord<T> } | { kind: 'error'; error: RillError }

export interface ClientOptions {
  defaultStream?: string
  connectTimeoutMs?: number
  initRetries?: number
  initIntervalMs?: number
  retries?: number
  backoffMs?: number
  backoffMaxMs?: number
  user?: string
  password?: string
  token?: string
  tlsCaFile?: string
  tlsCertFile?: string
  tlsKeyFile?: string
}
export type OpenOptions = Pick<ClientOptions, 'defaultStream' | 'retries' | 'backoffMs' | 'backoffMaxMs'>

export interface TopicConfig {
  partitions: number
  retentionMs: number | null
  retentionBytes: number | null
  segmentBytes: number
  durability: string
  maxRecordBytes: number
  /** An elastic topic (docs/RANGES.md): its partitions are key ranges. */
  elastic: boolean
  /** An elastic topic's automatic policy, or null when off. */
  autoSplit: AutoSplit | null
}
export interface AutoSplit { bytesPerS: number; windowMs?: number | null; cooldownMs?: number | null }
/** A key range of an elastic topic: its partition number and the routing hashes it covers. */
/** A key range; `bytesPerS` is an open range's write rate over the last 10 s the server watched (null: sealed, or not watched yet). */
export interface RangeInfo { id: number; lo: bigint; hi: bigint; parents: number[]; sealedAt: number | null; bytesPerS: number | null }
/** What a split or merge did: [range, seal offset] pairs, the ranges opened, the epoch. */
export interface RangeChange { sealed: Array<[number, number]>; opened: number[]; rangeEpoch: number }

export declare class Rill {
  static connect(url: string, options?: ClientOptions): Promise<Rill>
  static open(dir: string, options?: OpenOptions): Promise<Rill>
  stream(name: string): Stream
  topic(name: string): Topic<Uint8Array>
  readonly defaultStream: string
  readonly isEmbedded: boolean
  readonly isClosed: boolean
  createStream(name: string, options?: { ifMissing?: boolean }): Promise<boolean>
  deleteStream(name: string): Promise<void>
  listStreams(): Promise<Array<{ name: string; topics: number }>>
  listTopics(stream?: string): Promise<Array<{ stream: string; name: string; config: TopicConfig }>>
  describeTopic(stream: string, topic: string): Promise<any>
  close(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}
export declare class Stream {
  readonly name: string
  topic(name: string): Topic<Uint8Array>
  ensure(): Promise<boolean>
  create(): Promise<boolean>
  delete(): Promise<void>
  topics(): Promise<Array<{ stream: string; name: string; config: TopicConfig }>>
}

export interface CreateTopicOptions {
  partitions?: number
  retentionMs?: number
  retentionBytes?: number
  segmentBytes?: number
  durability?: string
  maxRecordBytes?: number
  replicas?: number
  ifMissing?: boolean
  /** Partitions are key ranges that split and merge online without breaking any key's
   * order; publishes and producers route by range, readers read parents first. Named
   * consumers and groups refuse it for now. */
  elastic?: boolean
  /** With `elastic`: the broker's automatic split and merge policy. */
  autoSplit?: AutoSplit
}
export interface MessageOptions { key?: BytesLike; headers?: Headers }
export interface SendOptions extends MessageOptions { partition?: number }
export interface ReaderOptions { offsets?: Record<number, number> | Map<number, number>; maxBytes?: number; maxResults?: number }

export interface ProducerOptions {
  batchLength?: number
  lingerMs?: number
  maxBatchBytes?: number
  retries?: number
  retryIntervalMs?: number
  maxInFlight?: number
  idempotence?: boolean
  key?: BytesLike
  partition?: number
  background?: boolean
  shards?: number
  sharding?: 'ordered' | 'balanced'
  bufferMessages?: number
  backpressure?: 'block' | 'blockFor' | 'fail'
  backpressureTimeoutMs?: number
}

export type StartFrom =
  | { kind: 'first' } | { kind: 'last' } | { kind: 'end' } | { kind: 'next' }
  | { kind: 'offset'; offset: number } | { kind: 'timestamp'; timestampMicros: number }
export type CommitPolicyKind =
  | 'disabled' | 'interval' | 'polling' | 'intervalOrPolling' | 'all' | 'intervalOrAll'
  | 'each' | 'intervalOrEach' | 'every' | 'intervalOrEvery'
export type CommitPolicy = CommitPolicyKind | { kind: CommitPolicyKind; intervalMs?: number; every?: number }
export interface ConsumerCommonOptions {
  batchLength?: number
  pollIntervalMs?: number
  startFrom?: StartFrom
  allowReplay?: boolean
  /** false: CommitPolicy disabled (commit after handling); true: the SDK's default. */
  autoCommit?: boolean
  commitPolicy?: CommitPolicy
  maxWaitMs?: number
  pollingRetryIntervalMs?: number
}
export interface ConsumerOptions extends ConsumerCommonOptions { maxBytes?: number }
export interface PollOptions extends WaitOptions { maxResults?: number; timeoutMs?: number }
export interface GroupOptions extends ConsumerCommonOptions {
  memberId?: string
  sessionTimeoutMs?: number
  createGroup?: boolean
}
export interface WaitOptions { signal?: AbortSignal }

export declare class Topic<T = Uint8Array> {
  readonly stream: string
  readonly name: string
  readonly codec: Codec<T>
  typed<U>(codec: Codec<U>): Topic<U>
  json<U = any>(codec?: Codec<U>): Topic<U>
  bytes(): Topic<Uint8Array>
  ensure(partitions: number): Promise<TopicConfig>
  create(options?: CreateTopicOptions): Promise<TopicConfig>
  delete(): Promise<void>
  describe(): Promise<any>
  /** Splits an open range of an elastic topic (docs/RANGES.md). */
  splitRange(options?: { range?: number; at?: bigint | number }): Promise<RangeChange>
  /** Merges two neighbouring open ranges of an elastic topic. */
  mergeRanges(first: number, second: number): Promise<RangeChange>
  partitions(): Promise<number>
  firstOffset(partition: number): Promise<number>
  endOffset(partition: number): Promise<number>
  offsetForTime(partition: number, timestampUs: number): Promise<number>
  publish(): Publish<T>
  publishBatch(messages: Array<{ value: T } & MessageOptions>): Promise<Position[]>
  records(name: string, options?: ReaderOptions): Reader<T>
  producer(options?: ProducerOptions): Producer<T>
  consumer(name: string, partition: number, options?: ConsumerOptions): Promise<Consumer<T>>
  consumerGroup(group: string, options?: GroupOptions): Promise<GroupConsumer<T>>
  storedOffset(name: string, partition: number): Promise<number | null>
  storeOffset(name: string, partition: number, offset: number): Promise<void>
  describeGroup(group: string): Promise<any>
  deleteGroupOffset(group: string, partition: number): Promise<boolean>
}
export declare class Publish<T> {
  value(v: T): this
  json(v: unknown): this
  bytes(v: BytesLike): this
  key(k: BytesLike): this
  partition(n: number): this
  header(name: string, value: HeaderInput): this
  send(): Promise<Position>
}
export declare class Reader<T> implements AsyncIterable<RillRecord<T>> {
  readonly name: string
  poll(): Promise<Array<PollResult<T>>>
  offsets(): Record<number, number>
  [Symbol.asyncIterator](): AsyncIterator<RillRecord<T>>
}
export declare class Producer<T> {
  send(value: T, options?: SendOptions): Promise<Position | null>
  sendBatch(messages: Array<{ value: T } & MessageOptions>): Promise<Position[]>
  flush(): Promise<void>
  shutdown(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}
declare class BaseConsumer<T> implements AsyncIterable<RillRecord<T>> {
  next(options?: WaitOptions): Promise<RillRecord<T> | null>
  nextWithin(timeoutMs: number, options?: WaitOptions): Promise<RillRecord<T>>
  /** Up to `maxResults` (10,000) records at once: what was fetched already, else the
   * next fetch (waiting `timeoutMs` at most, then `[]`). The next call says the caller is
   * done with the records of this poll. */
  poll(options?: PollOptions): Promise<Array<PollResult<T>>>
  commit(record: Position): Promise<void>
  storeOffset(partition: number, offset: number): Promise<void>
  deleteOffset(partition: number): Promise<void>
  lastConsumedOffset(partition: number): number | null
  lastStoredOffset(partition: number): number | null
  shutdown(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
  [Symbol.asyncIterator](): AsyncIterator<RillRecord<T>>
}
export declare class Consumer<T> extends BaseConsumer<T> { readonly partition: number }
export declare class GroupConsumer<T> extends BaseConsumer<T> {
  readonly group: string
  readonly memberId: string
  assignment(): number[]
  position(partition: number): number | null
}

export declare class RillError extends Error {
  /** The protocol error code's name ("TOPIC_NOT_FOUND"), or null for a client error. */
  readonly code: string | null
  /** The Rust ClientError variant ("Server", "InvalidArgument", "Timeout", ...). */
  readonly kind: string
  readonly transient: boolean
  [field: string]: unknown
}
export declare class ServerError extends RillError {}
export declare class DataLossError extends ServerError {}
export declare class ConnectionError extends RillError {}
export declare class IndeterminateError extends RillError {}
export declare class ProtocolError extends RillError {}
export declare class InvalidUrlError extends RillError {}
export declare class InvalidArgumentError extends RillError {}
export declare class EncodeError extends RillError {}
export declare class DecodeError extends RillError {}
export declare class MalformedBatchError extends RillError {}
export declare class CorruptError extends RillError {}
export declare class TimeoutError extends RillError {}
export declare class EmbeddedError extends RillError {}
export declare class ShutdownError extends RillError {}
export declare class ClosedError extends RillError {}
export declare class PoisonedError extends RillError {}
export declare class BufferFullError extends RillError {}
export declare class EpochsExhaustedError extends RillError {}
export declare class BackgroundError extends RillError {}
export declare class PanicError extends RillError {}
export declare class AbortError extends RillError {}
export declare class InvalidNameError extends ServerError {}
export declare class StreamNotFoundError extends ServerError {}
export declare class TopicNotFoundError extends ServerError {}
export declare class NotAssignedError extends ServerError {}
export declare class UnknownCodeError extends ServerError {}
/** Every error class, including one per protocol error code (e.g. errors.TopicExistsError). */
export declare const errors: Record<string, typeof RillError>
