/**
 * An independent RFC 4180 reader for tests (not the production writer's code): a character state machine
 * over quoted/unquoted fields, CRLF or LF record ends, `""` inside quotes. Throws on malformed input (a quote
 * inside an unquoted field, text after a closing quote, an unterminated quote), so a writer bug that breaks
 * quoting fails the test instead of being read leniently.
 */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let i = 0;
  let quoted = false;
  let fieldStarted = false;
  const endField = (): void => {
    row.push(field);
    field = '';
    quoted = false;
    fieldStarted = false;
  };
  const endRow = (): void => {
    endField();
    rows.push(row);
    row = [];
  };
  while (i < text.length) {
    const c = text[i] as string;
    if (quoted) {
      if (c === '"') {
        if (text[i + 1] === '"') {
          field += '"';
          i += 2;
          continue;
        }
        quoted = false;
        i++;
        const d = text[i];
        if (d !== undefined && d !== ',' && d !== '\n' && d !== '\r')
          throw new Error(`text after closing quote at ${i}`);
        continue;
      }
      field += c;
      i++;
      continue;
    }
    if (c === '"') {
      if (fieldStarted) throw new Error(`quote inside unquoted field at ${i}`);
      quoted = true;
      fieldStarted = true;
      i++;
      continue;
    }
    if (c === ',') {
      endField();
      i++;
      continue;
    }
    if (c === '\r' && text[i + 1] === '\n') {
      endRow();
      i += 2;
      continue;
    }
    if (c === '\n') {
      endRow();
      i++;
      continue;
    }
    if (c === '\r') throw new Error(`bare CR at ${i}`);
    field += c;
    fieldStarted = true;
    i++;
  }
  if (quoted) throw new Error('unterminated quoted field');
  if (fieldStarted || row.length > 0) endRow();
  return rows;
}

/** Rows as objects keyed by the header; missing cells map to ''. */
export function csvObjects(text: string): { header: string[]; rows: Array<Record<string, string>> } {
  const [header = [], ...rest] = parseCsv(text);
  return {
    header,
    rows: rest.map((r) => {
      if (r.length !== header.length)
        throw new Error(`row has ${r.length} fields, header ${header.length}: ${JSON.stringify(r)}`);
      return Object.fromEntries(header.map((h, i) => [h, r[i] as string]));
    }),
  };
}
