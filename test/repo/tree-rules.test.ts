/**
 * The rules the source tree keeps (docs/development.md, "Rules the tree keeps"), checked on the TypeScript
 * sources, not on dist/: no file of src/ over 700 lines, no import cycle in src/, no class-inheritance chain in
 * src/ deeper than 2, one folder per role, every test file in a folder of test/ named after a folder of src/, the LAN
 * transports over src/device/ (none reaches the store, ingest, RPC broker, bus or upstream; none over 450 lines), and
 * no issue tags or section numbers in comments (src/, test/, scripts/). Reads files only.
 */
import '../helpers/sandbox.js';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import ts from 'typescript';

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
const MAX_LINES = 700;
const MAX_CLASS_CHAIN = 2;

/** Every .ts file under `dir` (absolute paths), sorted. */
function tsFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...tsFiles(path));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

const rel = (path: string): string => relative(ROOT, path).split('\\').join('/');

const SRC = tsFiles(join(ROOT, 'src'));
const sources = new Map(SRC.map((f) => [f, readFileSync(f, 'utf8')]));

/** The modules of `files` that `file` imports or re-exports by a relative specifier, type-only ones included. */
export function relativeImports(file: string, text: string, files: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const ref of ts.preProcessFile(text, true, true).importedFiles) {
    if (!ref.fileName.startsWith('.')) continue;
    const base = resolve(dirname(file), ref.fileName);
    const candidates = [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts')];
    const target = candidates.find((c) => files.has(c));
    if (target !== undefined) out.push(target);
  }
  return out;
}

/** The strongly connected components of more than one module (or a module importing itself): the cycles. */
export function importCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  // Tarjan's algorithm, iterative so a deep import chain cannot overflow the stack
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const cycles: string[][] = [];
  let next = 0;
  for (const root of graph.keys()) {
    if (index.has(root)) continue;
    const work: Array<{ node: string; edge: number }> = [{ node: root, edge: 0 }];
    index.set(root, next);
    low.set(root, next++);
    stack.push(root);
    onStack.add(root);
    while (work.length > 0) {
      const top = work[work.length - 1] as { node: string; edge: number };
      const edges = graph.get(top.node) ?? [];
      if (top.edge < edges.length) {
        const to = edges[top.edge++] as string;
        if (!index.has(to)) {
          index.set(to, next);
          low.set(to, next++);
          stack.push(to);
          onStack.add(to);
          work.push({ node: to, edge: 0 });
        } else if (onStack.has(to)) {
          low.set(top.node, Math.min(low.get(top.node) as number, index.get(to) as number));
        }
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent !== undefined)
        low.set(parent.node, Math.min(low.get(parent.node) as number, low.get(top.node) as number));
      if (low.get(top.node) !== index.get(top.node)) continue;
      const component: string[] = [];
      for (;;) {
        const n = stack.pop() as string;
        onStack.delete(n);
        component.push(n);
        if (n === top.node) break;
      }
      if (component.length > 1 || edges.includes(top.node)) cycles.push(component.sort());
    }
  }
  return cycles;
}

/** Every class declared in `text`, with the name of the class it extends (undefined: none). */
export function classHeritage(text: string): Array<{ name: string; base: string | undefined }> {
  const sf = ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, true);
  const out: Array<{ name: string; base: string | undefined }> = [];
  const visit = (node: ts.Node): void => {
    if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) {
      const ext = node.heritageClauses?.find((h) => h.token === ts.SyntaxKind.ExtendsKeyword)?.types[0];
      out.push({ name: node.name?.text ?? '(anonymous class)', base: ext?.expression.getText(sf) });
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/**
 * The longest inheritance chain of each class, counted in classes: a class that extends nothing is 1, one that
 * extends a class from outside src/ (Error) is 2, one that extends a class of src/ is one more than that class.
 */
export function classChains(classes: ReadonlyArray<{ name: string; base: string | undefined }>): Map<string, string[]> {
  const bases = new Map<string, string | undefined>();
  for (const c of classes) bases.set(c.name, c.base);
  const chains = new Map<string, string[]>();
  for (const c of classes) {
    const chain = [c.name];
    let base = c.base;
    while (base !== undefined && !chain.includes(base)) {
      chain.push(base);
      base = bases.get(base);
    }
    chains.set(c.name, chain);
  }
  return chains;
}

/**
 * A comment that cites the project's history or documents outside the repository: a section sign and number, an
 * issue by number or by name, the interface contract by its file's name (examples in the last test below).
 */
const TAGS: readonly RegExp[] = [
  // a public standard's section (RFC 7252 section 4.2) is a citation anyone can open; the contract's is not
  /(?<!\bRFC\s*\d+\s*)§\s*\d/,
  /\bpre-issue\b/i,
  /\bissues?[\s#-]*\d/i,
  /\(([^()]*\s)?issue\)/i,
  /\bissue's\b/i,
  /\b(the|this|that|another|an|next|previous|earlier|later)\s+(\w+\s+)?issue\b/i,
  /\bCONTRACT\b/,
];

/** The first tag in `comment`, or undefined. */
export function tagIn(comment: string): string | undefined {
  return tagAt(comment)?.tag;
}

/** The first tag in `comment` and its line within the comment (0: the first), or undefined. */
function tagAt(comment: string): { tag: string; line: number } | undefined {
  for (const re of TAGS) {
    const m = re.exec(comment);
    if (m !== null) return { tag: m[0], line: (comment.slice(0, m.index).match(/\n/g) ?? []).length };
  }
  return undefined;
}

/** The text of every comment in `text`, with its 1-based line. */
export function comments(text: string): Array<{ line: number; text: string }> {
  const sf = ts.createSourceFile('x.ts', text, ts.ScriptTarget.Latest, true);
  const seen = new Set<number>();
  const out: Array<{ line: number; text: string }> = [];
  const take = (ranges: ts.CommentRange[] | undefined): void => {
    for (const r of ranges ?? []) {
      if (seen.has(r.pos)) continue;
      seen.add(r.pos);
      out.push({ line: sf.getLineAndCharacterOfPosition(r.pos).line + 1, text: text.slice(r.pos, r.end) });
    }
  };
  // every token's comments, tokens included (a comment after `(` is the trailing comment of that token)
  const visit = (node: ts.Node): void => {
    take(ts.getLeadingCommentRanges(text, node.getFullStart()));
    take(ts.getTrailingCommentRanges(text, node.getEnd()));
    for (const child of node.getChildren(sf)) visit(child);
  };
  visit(sf);
  return out.sort((a, b) => a.line - b.line);
}

t.test(`no file of src/ is over ${MAX_LINES} lines`, async (t) => {
  t.ok(SRC.length > 50, `src/ read (${SRC.length} files)`);
  const long = SRC.map((f) => ({ file: rel(f), lines: (sources.get(f)?.match(/\n/g) ?? []).length })).filter(
    (x) => x.lines > MAX_LINES,
  );
  t.same(long, [], 'files over the limit');
});

t.test('no import cycle in src/', async (t) => {
  const files = new Set(SRC);
  const graph = new Map(SRC.map((f) => [f, relativeImports(f, sources.get(f) as string, files)]));
  t.ok(
    [...graph.values()].some((to) => to.length > 0),
    'imports found',
  );
  t.same(
    importCycles(graph).map((c) => c.map(rel)),
    [],
    'modules importing each other, directly or through others',
  );
});

t.test(`no class-inheritance chain in src/ deeper than ${MAX_CLASS_CHAIN}`, async (t) => {
  const classes = SRC.flatMap((f) => classHeritage(sources.get(f) as string));
  t.ok(classes.length > 10, `classes found (${classes.length})`);
  const deep = [...classChains(classes).values()].filter((chain) => chain.length > MAX_CLASS_CHAIN);
  t.same(
    deep.map((chain) => chain.join(' → ')),
    [],
    'class → base → ...',
  );
});

/**
 * The folders of src/ whose name another folder of src/ has too (e.g. two `mqtt/` of opposite roles). A folder of
 * `src/api/` named as a folder of `src/` holds that concern's REST handlers (`api/auth` over `auth`): one role.
 */
export function sharedFolderNames(files: readonly string[]): string[] {
  const byName = new Map<string, Set<string>>();
  for (const f of files) {
    const parts = f.split('/').slice(0, -1);
    for (let i = 1; i < parts.length; i++) {
      const name = parts[i] as string;
      const set = byName.get(name) ?? new Set<string>();
      set.add(parts.slice(0, i + 1).join('/'));
      byName.set(name, set);
    }
  }
  const layered = (name: string, dirs: Set<string>): boolean =>
    dirs.size === 2 && dirs.has(`src/${name}`) && dirs.has(`src/api/${name}`);
  return [...byName]
    .filter(([name, dirs]) => dirs.size > 1 && !layered(name, dirs))
    .map(([name, dirs]) => `${name}: ${[...dirs].join(', ')}`);
}

t.test('one folder per role and one session.ts in src/ (docs/development.md)', async (t) => {
  const files = SRC.map(rel);
  t.same(sharedFolderNames(files), [], 'no two folders of src/ share a name');
  t.same(
    files.filter((f) => f.endsWith('/session.ts')),
    ['src/cli/session.ts'],
    "the one session.ts is the CLI's saved logins",
  );
  t.same(
    sharedFolderNames(['src/mqtt/a.ts', 'src/sync/mqtt/b.ts']),
    ['mqtt: src/mqtt, src/sync/mqtt'],
    'a repeat is found',
  );
});

/**
 * The test files (`*.test.ts` under `test/`) not in a folder of `test/` named as a folder of `src/`: a module's tests
 * are found where the module is. `test/repo/` holds the tests of the repository as a whole (these rules, the docs'
 * links, the lockfile); `helpers/` and `fixtures/` hold no test file.
 */
export function misplacedTests(tests: readonly string[], srcDirs: ReadonlySet<string>): string[] {
  return tests.filter((f) => {
    const dir = f.split('/').slice(1, -1).join('/');
    return !(dir === 'repo' || srcDirs.has(dir));
  });
}

t.test('every test file lives in a folder named after a folder of src/', async (t) => {
  const srcDirs = new Set(SRC.map((f) => rel(f).split('/').slice(1, -1).join('/')).filter((d) => d !== ''));
  for (const d of [...srcDirs])
    for (let i = d.indexOf('/'); i > 0; i = d.indexOf('/', i + 1)) srcDirs.add(d.slice(0, i));
  const tests = tsFiles(join(ROOT, 'test'))
    .map(rel)
    .filter((f) => f.endsWith('.test.ts'));
  t.ok(tests.length > 100, `test files found (${tests.length})`);
  t.same(misplacedTests(tests, srcDirs), [], 'test files flat in test/ or in a folder src/ has not');
  t.same(
    misplacedTests(
      ['test/a.test.ts', 'test/store/b.test.ts', 'test/helpers/c.test.ts', 'test/repo/d.test.ts'],
      srcDirs,
    ),
    ['test/a.test.ts', 'test/helpers/c.test.ts'],
    'a flat test and a test among the helpers are found',
  );
});

/** The files of `graph` from which `target` cannot be reached by imports. */
export function notReaching(
  graph: ReadonlyMap<string, readonly string[]>,
  from: readonly string[],
  target: string,
): string[] {
  const reaches = new Map<string, boolean>();
  const visit = (f: string, path: Set<string>): boolean => {
    const known = reaches.get(f);
    if (known !== undefined) return known;
    if (f === target) return true;
    if (path.has(f)) return false;
    path.add(f);
    const found = (graph.get(f) ?? []).some((g) => visit(g, path));
    path.delete(f);
    reaches.set(f, found);
    return found;
  };
  return from.filter((f) => !visit(f, new Set()));
}

t.test(
  'every test file runs in the sandbox (test/helpers/sandbox.ts): no cwd, home or OUTPOST_* of the user',
  async (t) => {
    const files = [...tsFiles(join(ROOT, 'test')), ...tsFiles(join(ROOT, 'scripts')), ...SRC];
    const set = new Set(files);
    const graph = new Map(files.map((f) => [f, relativeImports(f, readFileSync(f, 'utf8'), set)]));
    const tests = files.filter((f) => f.endsWith('.test.ts'));
    t.same(
      notReaching(graph, tests, join(ROOT, 'test/helpers/sandbox.ts')).map(rel),
      [],
      "test files importing neither it nor a helper that does (import '../helpers/sandbox.js' first)",
    );
    t.same(
      notReaching(
        new Map([
          ['a', ['b']],
          ['b', ['s']],
          ['c', ['d']],
          ['d', ['c']],
        ]),
        ['a', 'c'],
        's',
      ),
      ['c'],
      'found through a helper; a cycle reaches nothing',
    );
  },
);

/** The wings of src/ a LAN transport reaches only through the device layer, src/device/ (docs/development.md). */
const BEHIND_THE_DEVICE_LAYER: readonly string[] = ['store', 'ingest', 'rpc', 'bus', 'upstream'];
const MAX_TRANSPORT_LINES = 450;
/** the one file of src/transports that names src/context.ts: what a transport is handed of the daemon */
const TRANSPORT_SERVICES = 'src/transports/services.ts';

/**
 * The imports of `src/transports/**` files (paths relative to the repository) into a wing of `wings`, as
 * `file → import`; type-only imports count too (a transport that names a store's type is tied to the store).
 */
export function transportReaches(graph: ReadonlyMap<string, readonly string[]>, wings: readonly string[]): string[] {
  const out: string[] = [];
  for (const [file, imports] of graph) {
    if (!file.startsWith('src/transports/')) continue;
    for (const to of imports) if (wings.some((w) => to.startsWith(`src/${w}/`))) out.push(`${file} → ${to}`);
  }
  return out;
}

t.test('the LAN transports call the device layer, not the store, ingest, RPC broker, bus or upstream', async (t) => {
  const files = new Set(SRC);
  const graph = new Map(
    SRC.map((f) => [rel(f), relativeImports(f, sources.get(f) as string, files).map(rel)] as const),
  );
  t.ok(
    [...graph.keys()].some((f) => f.startsWith('src/transports/')),
    'transports found',
  );
  t.same(transportReaches(graph, BEHIND_THE_DEVICE_LAYER), [], 'transport → what it reaches around src/device/');
  t.same(
    [...graph]
      .filter(([f, to]) => f.startsWith('src/transports/') && f !== TRANSPORT_SERVICES && to.includes('src/context.ts'))
      .map(([f]) => f),
    [],
    `transports taking the daemon's Services whole, not ${TRANSPORT_SERVICES}'s config, log and device layer`,
  );
  t.same(
    transportReaches(
      new Map([
        ['src/transports/x/a.ts', ['src/device/actions.ts', 'src/store/entities.ts']],
        ['src/device/actions.ts', ['src/store/entities.ts']],
      ]),
      BEHIND_THE_DEVICE_LAYER,
    ),
    ['src/transports/x/a.ts → src/store/entities.ts'],
    'a transport reaching the store is found; the device layer may',
  );
  // status/: a transport keeps its own counters (status/metrics.ts); failures are counted through src/device/
  t.same(
    transportReaches(graph, ['status']).filter((x) => !x.endsWith(' → src/status/metrics.ts')),
    [],
    'transport → status/ other than its counters',
  );
});

t.test(`no file of src/transports is over ${MAX_TRANSPORT_LINES} lines`, async (t) => {
  const long = SRC.filter((f) => rel(f).startsWith('src/transports/'))
    .map((f) => ({ file: rel(f), lines: (sources.get(f)?.match(/\n/g) ?? []).length }))
    .filter((x) => x.lines > MAX_TRANSPORT_LINES);
  t.same(long, [], 'transport files over the limit (a transport is codec, session and calls into src/device/)');
});

t.test('no issue tags or section numbers in comments of src/, test/ and scripts/', async (t) => {
  const files = [...SRC, ...tsFiles(join(ROOT, 'test')), ...tsFiles(join(ROOT, 'scripts'))];
  const found: string[] = [];
  for (const f of files) {
    for (const c of comments(readFileSync(f, 'utf8'))) {
      const at = tagAt(c.text);
      if (at !== undefined) found.push(`${rel(f)}:${c.line + at.line}: ${at.tag}`);
    }
  }
  t.same(found, [], 'comments citing issues or sections (docs/development.md)');
});

/** The imports of `graph` from a file under one of `from` (folders or files of src/) to one of `to`, as `a → b`. */
export function importsBetween(
  graph: ReadonlyMap<string, readonly string[]>,
  from: readonly string[],
  to: readonly string[],
): string[] {
  const under = (f: string, prefixes: readonly string[]): boolean =>
    prefixes.some((p) => f === p || f.startsWith(`${p}/`));
  const out: string[] = [];
  for (const [f, targets] of graph) {
    if (!under(f, from)) continue;
    for (const g of targets) if (under(g, to)) out.push(`${f} → ${g}`);
  }
  return out.sort();
}

/** What in `text` works LMDB itself (a transaction opened, the lmdb package imported), or undefined. */
export function lmdbAtHand(text: string): string | undefined {
  return /\.transaction(Sync)?\(|\bfrom 'lmdb'/.exec(text)?.[0];
}

t.test('the floors of the store and the upstream (docs/development.md, docs/sync.md)', async (t) => {
  const files = new Set(SRC);
  const graph = new Map(SRC.map((f) => [rel(f), relativeImports(f, sources.get(f) as string, files).map(rel)]));
  t.same(
    importsBetween(graph, ['src/store', 'src/upstream'], ['src/context.ts']),
    [],
    'the store and the upstream take the log from src/log.ts, not the services (context.ts)',
  );
  t.same(importsBetween(graph, ['src/log.ts'], ['src']), [], 'src/log.ts imports nothing of src/');
  t.same(
    importsBetween(graph, ['src/upstream'], ['src/store/env.ts']),
    [],
    'the upstream sees the outbox through its ports (store/outbox.ts), not the LMDB environment',
  );
  t.same(
    SRC.map(rel).filter(
      (f) => f.startsWith('src/upstream/') && lmdbAtHand(sources.get(join(ROOT, f)) as string) !== undefined,
    ),
    [],
    'no module of src/upstream/ opens an LMDB transaction or imports lmdb',
  );
  t.same(
    importsBetween(
      new Map([
        ['src/store/a.ts', ['src/context.ts', 'src/log.ts']],
        ['src/storex/b.ts', ['src/context.ts']],
      ]),
      ['src/store'],
      ['src/context.ts'],
    ),
    ['src/store/a.ts → src/context.ts'],
    'an import is found by folder, a folder by its whole name',
  );
  t.equal(lmdbAtHand('await env.root.transaction(() => {});'), '.transaction(');
  t.equal(lmdbAtHand("import { open } from 'lmdb';"), "from 'lmdb'");
  t.equal(lmdbAtHand('// in the transaction of the batch'), undefined);
});

t.test('the checks find what they look for', async (t) => {
  const a = '/r/a.ts';
  const b = '/r/b.ts';
  const c = '/r/c.ts';
  const files = new Set([a, b, c]);
  t.same(relativeImports(a, "import type { X } from './b.js';\nexport * from './c.js';\nimport 'node:fs';", files), [
    b,
    c,
  ]);
  const cycles = importCycles(
    new Map([
      [a, [b]],
      [b, [c]],
      [c, [a]],
    ]),
  );
  t.same(cycles, [[a, b, c]], 'a → b → c → a');
  t.same(
    importCycles(
      new Map([
        [a, [b]],
        [b, [c]],
        [c, []],
      ]),
    ),
    [],
    'a chain is not a cycle',
  );
  const chains = classChains(
    classHeritage('class A {}\nclass B extends A {}\nclass C extends B {}\nclass E extends Error {}'),
  );
  t.same(chains.get('C'), ['C', 'B', 'A'], 'three deep');
  t.same(chains.get('E'), ['E', 'Error'], 'an outside base counts');
  for (const tagged of [
    '// §9',
    '/** (attributes issue) */',
    '// the pre-issue-19 behaviour',
    '// see issue 36',
    "// the issue's budget",
    '// the sync issue forwards them',
  ])
    t.ok(tagIn(tagged), tagged);
  for (const clean of [
    '// `outpost ticket keygen` / `issue`',
    '// issue(user) signs a token',
    '// tissue',
    '// the contract of this seam',
    '// a CON asks for an answer (RFC 7252 section 4.2)',
  ])
    t.equal(tagIn(clean), undefined, clean);
  t.same(
    comments("const s = '// § 1 not a comment';\n// a comment\nf(/* inline */ 1);").map((x) => x.text),
    ['// a comment', '/* inline */'],
  );
});
