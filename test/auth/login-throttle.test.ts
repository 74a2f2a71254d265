/**
 * The failed-login throttle (src/auth/throttle.ts) on a fake clock: a lock after MAX_FAILURES in a window, per
 * username and per address, ending by itself after LOCK_MS; refusals during a lock do not extend it; a success
 * clears; the maps stay bounded. And the failure log's rate limit (src/status/failures.ts).
 */
import '../helpers/sandbox.js';
import t from 'tap';
import { FakeClock } from '../helpers/fake-clock.js';
import { waitFor } from '../helpers/wait.js';
import { FAILURE_WINDOW_MS, LOCK_MS, LoginThrottle, MAX_FAILURES, MAX_TRACKED } from '../../src/auth/throttle.js';
import { FailureLog, tokenPrefix } from '../../src/status/failures.js';

t.test('a lock after MAX_FAILURES in a minute, ending by itself', async (t) => {
  const clock = new FakeClock(Date.UTC(2026, 10, 28));
  const th = new LoginThrottle(() => clock.now());
  for (let i = 1; i < MAX_FAILURES; i++) t.equal(th.failed('Admin@example.com', '10.0.0.5'), undefined);
  t.equal(th.locked('admin@example.com', '10.0.0.9'), undefined, 'not yet');
  t.same(th.failed('admin@example.com', '10.0.0.5'), { by: 'user', retryAfterMs: LOCK_MS }, 'the tenth locks');
  t.equal(th.locked('ADMIN@example.com', '10.0.0.9')?.by, 'user', 'the user, from any address');
  t.equal(th.locked('other@example.com', '10.0.0.5')?.by, 'address', 'the address, for any user');
  t.equal(th.locked('other@example.com', '10.0.0.9'), undefined);
  clock.advance(LOCK_MS - 1000);
  t.equal(th.locked('admin@example.com', '10.0.0.9')?.retryAfterMs, 1000, 'Retry-After counts down');
  clock.advance(1000);
  t.equal(th.locked('admin@example.com', '10.0.0.5'), undefined, 'over after LOCK_MS, never for good');
  t.equal(th.failed('admin@example.com', '10.0.0.5'), undefined, 'a failure after it starts counting afresh');
});

t.test('failures spread over more than a minute do not lock; a success clears', async (t) => {
  const clock = new FakeClock(Date.UTC(2026, 10, 28));
  const th = new LoginThrottle(() => clock.now());
  for (let i = 0; i < 3 * MAX_FAILURES; i++) {
    t.equal(th.failed('a@example.com', '10.0.0.5'), undefined);
    clock.advance(FAILURE_WINDOW_MS / (MAX_FAILURES - 2));
  }
  for (let i = 1; i < MAX_FAILURES; i++) th.failed('b@example.com', '10.0.0.6');
  th.succeeded('b@example.com', '10.0.0.6');
  t.equal(th.failed('b@example.com', '10.0.0.6'), undefined, 'a success starts the count afresh');
});

t.test('the maps stay bounded under a flood of made-up usernames and addresses', async (t) => {
  const clock = new FakeClock(Date.UTC(2026, 10, 28));
  const th = new LoginThrottle(() => clock.now());
  for (let i = 0; i < 3 * MAX_TRACKED; i++)
    th.failed(`user${i}@example.com`, `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`);
  t.ok(th.tracked <= 2 * MAX_TRACKED, `${th.tracked} entries`);
});

t.test('the failure log: the first at once, then one line with how many more came', async (t) => {
  const lines: string[] = [];
  const log = new FailureLog((l) => lines.push(l), undefined, Date.now, 500);
  for (let i = 0; i < 50; i++) log.note('deviceToken', `unknown token ${i}`, `10.0.0.${i}`);
  log.note('login', 'failed login', '10.0.0.1');
  t.same(lines, ['unknown token 0', 'failed login'], 'one line per kind at first');
  await waitFor(() => lines.length >= 3, { message: 'the summary line' });
  t.equal(lines.length, 3);
  t.match(
    lines[2],
    /^49 more requests with an unknown device access token in the last 1 s \(the last from 10\.0\.0\.49\)$/,
  );
  t.equal(log.counts.deviceToken, 50);
  t.equal(log.counts.login, 1);
  log.note('deviceToken', 'unknown token again', '10.0.0.1');
  t.equal(lines.length, 3, 'within the interval after the summary: held for the next');
  log.close();
  t.equal(lines.length, 4, 'close says what is held');
});

t.test('a token prefix never shows a whole token', async (t) => {
  t.equal(tokenPrefix('THERMO_TOKEN'), 'THER…');
  t.equal(tokenPrefix('abc'), 'a…');
  t.equal(tokenPrefix('x'), '…');
});
