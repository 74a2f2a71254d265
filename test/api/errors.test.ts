/**
 * The error catalogue (src/errors.ts): every code is documented in README's "Errors" table with
 * the same HTTP status and TB errorCode, the table lists no code that does not exist, and the error JSON
 * has TB's shape (docs/api.md).
 */
import '../helpers/sandbox.js';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { ERRORS, type ErrorCode, OutpostError, asOutpostError, errorBody } from '../../src/errors.js';

/** README.md of the repository: the nearest one above this file next to a package.json (dist/ or another outDir). */
function readme(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'README.md')))
      return readFileSync(join(dir, 'README.md'), 'utf8');
    const up = dirname(dir);
    if (up === dir) throw new Error('README.md not found');
    dir = up;
  }
}

interface Row {
  status: number;
  tbCode: number;
  meaning: string;
}

/** Rows of the first table under the "## Errors" heading: | `CODE` | status | TB errorCode | meaning | */
function errorTable(md: string): Map<string, Row> {
  const start = md.search(/^## Errors\s*$/m);
  if (start < 0) return new Map();
  const rest = md.slice(start).split('\n').slice(1);
  const nextHeading = rest.findIndex((l) => /^#{1,2} /.test(l));
  const section = nextHeading < 0 ? rest : rest.slice(0, nextHeading);
  const rows = new Map<string, Row>();
  for (const line of section) {
    const m = /^\|\s*`?([A-Z_]+)`?\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(.*?)\s*\|\s*$/.exec(line);
    if (m) rows.set(m[1] as string, { status: Number(m[2]), tbCode: Number(m[3]), meaning: m[4] as string });
  }
  return rows;
}

t.test("every error code is in README's Errors table, with the same status and TB code", async (t) => {
  const table = errorTable(readme());
  t.ok(table.size > 0, 'README has an "## Errors" section with a table');
  for (const [code, entry] of Object.entries(ERRORS)) {
    const row = table.get(code);
    if (!row) {
      t.fail(`${code} is missing from README's error table`);
      continue;
    }
    t.equal(row.status, entry.status, `${code}: HTTP status`);
    t.equal(row.tbCode, entry.tbCode, `${code}: TB errorCode`);
    t.ok(row.meaning.length > 0, `${code}: has a meaning`);
  }
  for (const code of table.keys()) t.ok(code in ERRORS, `README documents ${code}, which exists`);
});

t.test('OutpostError and the TB error JSON', async (t) => {
  for (const code of Object.keys(ERRORS) as ErrorCode[]) {
    const e = new OutpostError(code);
    t.equal(e.status, ERRORS[code].status);
    t.equal(e.tbCode, ERRORS[code].tbCode);
    t.equal(e.message, ERRORS[code].message, `${code}: default message`);
    t.ok(e.status >= 400 && e.status <= 599, `${code}: an error status`);
  }
  const e = new OutpostError('BAD_PAYLOAD', 'Key cannot be blank');
  t.same(JSON.parse(errorBody(e, 1234)), {
    status: 400,
    message: 'Key cannot be blank',
    errorCode: 31,
    timestamp: 1234,
  });
  t.same(
    Object.keys(JSON.parse(errorBody(e)) as object),
    ['status', 'message', 'errorCode', 'timestamp'],
    'TB field order',
  );
  const cause = new Error('disk on fire');
  const wrapped = asOutpostError(cause);
  t.equal(wrapped.code, 'INTERNAL', 'unknown errors become INTERNAL');
  t.equal(wrapped.cause, cause, 'and keep their cause');
  t.equal(JSON.parse(errorBody(wrapped)).message, 'Internal server error', 'the cause is not leaked to the client');
  t.equal(asOutpostError(e), e, 'an OutpostError passes through');
});
