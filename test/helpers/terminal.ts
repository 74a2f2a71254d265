/**
 * A technician's terminal for the CLI's screen tests: a tmux server of its own with one pane `cols` wide, TZ=UTC,
 * its own cwd and HOME, no CLI target from the environment; colour off unless asked (`color`: TERM=xterm and
 * NO_COLOR unset, so the CLI colours as on a real terminal). Skip the test where tmux is missing (`hasTmux`).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import type { Test } from 'tap';
import { tempDir } from './server.js';
import { waitFor } from './wait.js';

export interface TerminalOptions {
  readonly cols: number;
  readonly cwd?: string;
  readonly home?: string;
  readonly color?: boolean;
}

export interface Terminal {
  /** a tmux command on this terminal's server; its output */
  tm(...args: string[]): string;
  /** the screen as text */
  screen(): string;
  /** the screen with its SGR sequences */
  screenSgr(): string;
  /** types `keys` and Enter */
  type(keys: string): void;
  /** waits until the screen shows `what` (the command drew it); the screen then */
  until(what: RegExp): Promise<string>;
  /** runs `cmd` to its end after a clear; the screen after it */
  run(cmd: string): string;
  /** the screen's lines that the terminal wrapped: a joined capture (-J) differs from the plain one there */
  wrapped(): string[];
}

/** captures `wrapped` may take before it gives up on a screen that keeps changing (a few ms each) */
const STILL_SCREEN_ATTEMPTS = 100;

export function terminal(t: Test, o: TerminalOptions): Terminal {
  const sock = `${tempDir(t)}/tmux.sock`;
  const tm = (...args: string[]): string => execFileSync('tmux', ['-S', sock, ...args], { encoding: 'utf8' });
  const colour = o.color === true ? ['-e', 'TERM=xterm'] : ['-e', 'NO_COLOR=1'];
  const env = ['-e', 'TZ=UTC', '-e', 'OUTPOST_URL=', '-e', `HOME=${o.home ?? tempDir(t)}`, '-e', 'XDG_CONFIG_HOME='];
  tm('new-session', '-d', '-x', String(o.cols), '-y', '30', '-c', o.cwd ?? tempDir(t), ...env, ...colour, 'sh');
  t.teardown(() => {
    spawnSync('tmux', ['-S', sock, 'kill-server']);
  });
  const screen = (): string => tm('capture-pane', '-p');
  // tmux's own environment may carry NO_COLOR into the pane's shell: a colour run unsets it
  const prefix = o.color === true ? 'unset NO_COLOR; ' : '';
  return {
    tm,
    screen,
    screenSgr: () => tm('capture-pane', '-p', '-e'),
    type(keys) {
      tm('send-keys', '-l', keys);
      tm('send-keys', 'Enter');
    },
    until: (what) =>
      waitFor(
        () => {
          const s = screen();
          return what.test(s) ? s : undefined;
        },
        { timeout: 10_000, interval: 25, message: () => `the screen never showed ${what}:\n${screen()}` },
      ),
    run(cmd) {
      tm('send-keys', `clear; ${prefix}${cmd}; tmux -S ${sock} wait-for -S done`, 'Enter');
      tm('wait-for', 'done');
      return screen();
    },
    wrapped() {
      // A line drawn between the two captures would read as wrapped (a tail still printing a late point): the
      // pair counts only when the screen is the same before and after the joined capture.
      for (let attempt = 0; attempt < STILL_SCREEN_ATTEMPTS; attempt++) {
        const before = screen();
        const joined = tm('capture-pane', '-p', '-J');
        if (screen() !== before) continue;
        const rows = before.split('\n').map((l) => l.trimEnd());
        return joined.split('\n').filter((l) => !rows.includes(l.trimEnd()));
      }
      throw new Error(`the screen did not hold still for ${STILL_SCREEN_ATTEMPTS} captures:\n${screen()}`);
    },
  };
}
