// A key's or value's bytes and their hex dump. The API sends a key or value as `text`
// when its shown bytes are UTF-8 and as `base64` otherwise (docs/HTTP_API.md §4);
// either way the bytes are recovered exactly here.

/** The shown bytes of an API key or value object. */
export function bytesOf(field) {
  if (!field) return new Uint8Array(0)
  if (typeof field.base64 === 'string') {
    let binary
    try {
      binary = atob(field.base64)
    } catch {
      return new Uint8Array(0)
    }
    const out = new Uint8Array(binary.length)
    for (let i = 0; i < binary.length; i += 1) out[i] = binary.charCodeAt(i)
    return out
  }
  return new TextEncoder().encode(field.text || '')
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'))

/** The classic dump, 16 bytes a line: the offset, the bytes in hex (two groups of
 * eight), and the printable ASCII ones (`.` for the others). At most `maxBytes` bytes. */
export function hexDump(bytes, maxBytes = Infinity) {
  const end = Math.min(bytes.length, maxBytes)
  const lines = []
  for (let at = 0; at < end; at += 16) {
    const row = bytes.subarray(at, Math.min(at + 16, end))
    const hex = []
    let ascii = ''
    for (let i = 0; i < 16; i += 1) {
      if (i === 8) hex.push('')
      if (i < row.length) {
        hex.push(HEX[row[i]])
        ascii += row[i] >= 0x20 && row[i] < 0x7f ? String.fromCharCode(row[i]) : '.'
      } else {
        hex.push('  ')
      }
    }
    lines.push(`${at.toString(16).padStart(8, '0')}  ${hex.join(' ')}  |${ascii}|`)
  }
  return lines.join('\n')
}

/** Bytes as hexadecimal with no spaces (for a short key). */
export function hexString(bytes) {
  let out = ''
  for (const b of bytes) out += HEX[b]
  return out
}
