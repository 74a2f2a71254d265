/**
 * What the CLI's pages promise is what the CLI does (docs/cli.md, docs/configuration.md, README.md, the
 * installer): the option tables mark as required exactly what `--help` marks `(required)`, a config error's line
 * is as documented, the shutdown answer README describes is the one the code gives, the installer's last lines
 * point at something that answers, and README explains npm 11's allowScripts warning.
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { cli, tempDir } from '../helpers/server.js';

const ROOT = join(import.meta.dirname, '..', '..', '..');
const read = (p: string): string => readFileSync(join(ROOT, p), 'utf8');

t.test('docs/cli.md marks required exactly what --help marks (required)', async (t) => {
  const md = read('docs/cli.md');
  const sections = md.split(/\n### /).slice(1);
  let checked = 0;
  for (const section of sections) {
    const m = /^`outpost ([a-z]+(?: [a-z]+)?)[^`]*`/.exec(section);
    if (m === null || !section.includes('| Option | Meaning |')) continue;
    const cmd = (m[1] as string).split(' ');
    const help = (await cli([...cmd, '--help'])).stdout;
    for (const row of section.matchAll(/^\| `(--[a-z-]+)[^|]*\| ([^\n]*)\|$/gm)) {
      const [, opt, meaning] = row as unknown as [string, string, string];
      const helpLine = help.split('\n').find((l) => l.trimStart().startsWith(`${opt} `) || l.includes(`, ${opt} `));
      if (helpLine === undefined) continue;
      checked++;
      t.equal(
        /^required/.test(meaning.trim()),
        helpLine.includes('(required)'),
        `outpost ${cmd.join(' ')} ${opt}: docs and --help agree on "required"`,
      );
    }
  }
  t.ok(checked >= 10, `${checked} option rows checked`);
});

t.test("configuration.md's config error line is the CLI's", async (t) => {
  const bad = join(tempDir(t), 'bad.json');
  writeFileSync(bad, JSON.stringify({ port: 'abc' }));
  const r = await cli(['serve', '--config', bad, '--check-config']);
  t.equal(r.code, 1);
  const line = r.stderr.trim().replace(bad, '/etc/outpost/outpost.json');
  t.ok(
    read('docs/configuration.md')
      .replace(/\s*\n\s*/g, ' ')
      .includes(line),
    `documented: ${line}`,
  );
});

t.test("README's shutdown answer is the code's", async (t) => {
  const row = read('README.md')
    .split('\n')
    .find((l) => l.startsWith('| `SERVICE_UNAVAILABLE`'));
  const thrown = (function scan(dir: string): boolean {
    return readdirSync(dir, { withFileTypes: true }).some((e) =>
      e.isDirectory()
        ? scan(join(dir, e.name))
        : e.name.endsWith('.ts') &&
          e.name !== 'errors.ts' &&
          readFileSync(join(dir, e.name), 'utf8').includes("'SERVICE_UNAVAILABLE'"),
    );
  })(join(ROOT, 'src'));
  t.equal(
    /not sent/.test(row ?? ''),
    !thrown,
    `README says ${thrown ? 'when' : 'that'} 503 is sent${thrown ? '' : ' never'}`,
  );
});

t.test('the installer points at something that answers; README on allowScripts', async (t) => {
  const install = read('scripts/install.sh');
  t.notMatch(install, /say "then open \$scheme:\/\/\$host:\$port /, 'not the root URL, which answers 404');
  t.match(install, /outpost status/, 'the next step is a command that answers');
  t.match(
    read('README.md'),
    /allowScripts[\s\S]{0,200}lmdb[\s\S]{0,40}msgpackr-extract/,
    'README: the allowScripts warning',
  );
});
