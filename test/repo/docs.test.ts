/**
 * The documentation follows the code: every key of the config defaults (src/config/index.ts) has a row in
 * docs/configuration.md that shows its default, and every link to docs/ in README.md (and between docs pages)
 * names a file that exists. Reads files only: no server, no store.
 */
import '../helpers/sandbox.js';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { DEFAULTS } from '../../src/config/index.js';

/** The repository: the nearest directory above this file holding package.json and README.md (dist/ or source). */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'README.md'))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error('README.md not found above the test');
    dir = up;
  }
}

const ROOT = repoRoot();

/** Every leaf of the defaults as [dotted key, value]; arrays are values, not objects to walk. */
export function configLeaves(obj: Record<string, unknown>, prefix = ''): Array<[string, unknown]> {
  const out: Array<[string, unknown]> = [];
  for (const [k, v] of Object.entries(obj)) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (typeof v === 'object' && v !== null && !Array.isArray(v))
      out.push(...configLeaves(v as Record<string, unknown>, key));
    else out.push([key, v]);
  }
  return out;
}

/** The table rows of a markdown page whose first cell is a `code` span, by that span's text. */
function rowsByFirstCell(md: string): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of md.split('\n')) {
    const m = /^\|\s*`([^`]+)`\s*\|/.exec(line);
    if (m) rows.set(m[1] as string, line);
  }
  return rows;
}

/** How a default must appear in its row, as a code span: strings bare (`""` when empty), the rest as JSON. */
function defaultSpan(value: unknown): string {
  if (typeof value === 'string') return value === '' ? '`""`' : `\`${value}\``;
  return `\`${JSON.stringify(value)}\``;
}

/** What is wrong with configuration.md for these keys: one line per missing row or default. */
export function configDocProblems(md: string, leaves: Array<[string, unknown]>): string[] {
  const rows = rowsByFirstCell(md);
  const problems: string[] = [];
  for (const [key, value] of leaves) {
    const row = rows.get(key);
    if (row === undefined) {
      problems.push(`config key "${key}" has no row in docs/configuration.md (a table row starting | \`${key}\` |)`);
      continue;
    }
    // Whitespace is free inside the row: `[600000, 3600000]` matches [600000,3600000].
    const want = defaultSpan(value).replace(/\s+/g, '');
    if (!row.replace(/\s+/g, '').includes(want)) {
      problems.push(
        `config key "${key}": its row in docs/configuration.md does not show the default ${defaultSpan(value)}`,
      );
    }
  }
  return problems;
}

/** Relative links to .md files in a markdown page (anchors dropped), e.g. docs/api.md from [x](docs/api.md#y). */
function mdLinks(md: string): string[] {
  const links: string[] = [];
  for (const m of md.matchAll(/\]\(([^)\s]+?\.md)(#[^)\s]*)?\)/g)) {
    const target = m[1] as string;
    if (!/^[a-z]+:/i.test(target)) links.push(target);
  }
  return links;
}

function markdownFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...markdownFiles(path));
    else if (name.endsWith('.md')) out.push(path);
  }
  return out;
}

t.test('every config key is in docs/configuration.md with its default', async (t) => {
  const md = readFileSync(join(ROOT, 'docs/configuration.md'), 'utf8');
  const leaves = configLeaves(DEFAULTS as unknown as Record<string, unknown>);
  t.ok(leaves.length > 40, `the defaults walk finds the keys (${leaves.length})`);
  const problems = configDocProblems(md, leaves);
  for (const p of problems) t.fail(p);
  t.same(problems, [], 'no key missing, no default different');
});

t.test('the config check reports a key that is missing or documented with another default', async (t) => {
  const md = '| Key | Default |\n|---|---|\n| `a.b` | `5` |\n| `a.c` | `[1, 2]` |\n| `s` | `""` |\n';
  t.same(
    configDocProblems(md, [
      ['a.b', 5],
      ['a.c', [1, 2]],
      ['s', ''],
    ]),
    [],
    'all documented',
  );
  const missing = configDocProblems(md, [
    ['a.b', 5],
    ['mqtt.port', 1883],
  ]);
  t.equal(missing.length, 1);
  t.match(missing[0], /"mqtt\.port" has no row/, 'names the missing key');
  const changed = configDocProblems(md, [['a.b', 6]]);
  t.match(changed[0], /"a\.b".*default `6`/, 'names the key whose default differs');
});

t.test('README links at least four docs pages, and every docs link resolves', async (t) => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const fromReadme = mdLinks(readme).filter((l) => l.startsWith('docs/'));
  t.ok(new Set(fromReadme).size >= 4, `README links ${new Set(fromReadme).size} docs pages`);
  for (const link of fromReadme) t.ok(existsSync(join(ROOT, link)), `README links ${link}, which exists`);

  for (const page of markdownFiles(join(ROOT, 'docs'))) {
    for (const link of mdLinks(readFileSync(page, 'utf8'))) {
      const target = resolve(dirname(page), link);
      t.ok(existsSync(target), `${relative(ROOT, page)} links ${link}, which exists`);
    }
  }
});
