/**
 * The Gateway API's telemetry body `{"<device>":[..],..}` cut into each device's array bytes, so each array
 * goes through the same one-pass telemetry parser as an HTTP body (fastpath.ts) instead of a JSON tree. It
 * only finds the top-level members; it answers `undefined` for anything it does not take whole (a member
 * that is not an array, a duplicate name, bad syntax), and the general path then decides and reports.
 */

const WS = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** The index just past the string starting at `i` (a `"`), or -1. */
function stringEnd(b: Buffer, i: number): number {
  for (let j = i + 1; j < b.length; j++) {
    const c = b[j] as number;
    if (c === 0x5c) j++;
    else if (c === 0x22) return j + 1;
  }
  return -1;
}

/** The index just past the array starting at `i` (a `[`), nested values and strings skipped, or -1. */
function arrayEnd(b: Buffer, i: number): number {
  let depth = 0;
  for (let j = i; j < b.length; j++) {
    const c = b[j] as number;
    if (c === 0x22) {
      j = stringEnd(b, j) - 1;
      if (j < 0) return -1;
    } else if (c === 0x5b || c === 0x7b) depth++;
    else if (c === 0x5d || c === 0x7d) {
      depth--;
      if (depth === 0) return c === 0x5d ? j + 1 : -1;
    }
  }
  return -1;
}

/** The JSON string (an object's key) starting at `i`, and the index just past it; undefined if there is none. */
function keyAt(b: Buffer, i: number): { name: string; end: number } | undefined {
  if (b[i] !== 0x22) return undefined;
  const end = stringEnd(b, i);
  if (end < 0) return undefined;
  try {
    return { name: JSON.parse(b.toString('utf8', i, end)) as string, end };
  } catch {
    return undefined;
  }
}

/**
 * The likely one member of `{"<device>":[..]}` without reading the array: the name, and the bytes from the
 * first member's `[` to the `]` before the body's closing `}`. Only a candidate: with two members or more
 * those bytes are `[..],"b":[..]`, not one array. It is the one member exactly when they parse whole as an
 * array (the one-pass parser checks that), so a caller takes it then and otherwise splits the body
 * (splitDeviceArrays); it saves reading a large body twice, once here and once by the parser.
 */
export function singleDeviceCandidate(b: Buffer): [name: string, array: Buffer] | undefined {
  let i = 0;
  while (i < b.length && WS(b[i] as number)) i++;
  if (b[i] !== 0x7b) return undefined;
  i++;
  while (i < b.length && WS(b[i] as number)) i++;
  const key = keyAt(b, i);
  if (key === undefined) return undefined;
  const name = key.name;
  i = key.end;
  while (i < b.length && WS(b[i] as number)) i++;
  if (b[i] !== 0x3a) return undefined;
  i++;
  while (i < b.length && WS(b[i] as number)) i++;
  if (b[i] !== 0x5b) return undefined;
  let j = b.length - 1;
  while (j > i && WS(b[j] as number)) j--;
  if (b[j] !== 0x7d) return undefined;
  j--;
  while (j > i && WS(b[j] as number)) j--;
  if (b[j] !== 0x5d) return undefined;
  return [name, b.subarray(i, j + 1)];
}

export function splitDeviceArrays(b: Buffer): Array<[name: string, array: Buffer]> | undefined {
  let i = 0;
  const skip = (): void => {
    while (i < b.length && WS(b[i] as number)) i++;
  };
  skip();
  if (b[i] !== 0x7b) return undefined;
  i++;
  const out: Array<[string, Buffer]> = [];
  const seen = new Set<string>();
  skip();
  if (b[i] === 0x7d) return undefined;
  for (;;) {
    skip();
    const key = keyAt(b, i);
    if (key === undefined) return undefined;
    const name = key.name;
    if (seen.has(name)) return undefined;
    seen.add(name);
    i = key.end;
    skip();
    if (b[i] !== 0x3a) return undefined;
    i++;
    skip();
    if (b[i] !== 0x5b) return undefined;
    const aEnd = arrayEnd(b, i);
    if (aEnd < 0) return undefined;
    out.push([name, b.subarray(i, aEnd)]);
    i = aEnd;
    skip();
    if (b[i] === 0x2c) {
      i++;
      continue;
    }
    if (b[i] !== 0x7d) return undefined;
    i++;
    skip();
    return i === b.length ? out : undefined;
  }
}
