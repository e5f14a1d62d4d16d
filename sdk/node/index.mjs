// ESM entry: the same classes as the CommonJS entry (one addon, one set of classes).
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const rill = require('./index.cjs')

export const {
  Rill, Stream, Topic, Publish, Reader, Producer, Consumer, GroupConsumer, HeaderValue, JSON_CODEC,
  BYTES_CODEC, utf8, partitionForKey, nameProblem, NAME_LEN_MAX, VERSION, errors, RillError, ServerError,
  InvalidArgumentError, InvalidNameError, TopicNotFoundError, StreamNotFoundError, TimeoutError,
  ShutdownError, ClosedError, ConnectionError, InvalidUrlError, DecodeError, EncodeError, AbortError,
  NotAssignedError, DataLossError, CorruptError, PanicError,
} = rill
export default rill
