import type { Principal } from '../auth/index.js';
import type { Services } from '../context.js';
import type { HttpContext } from '../uws/adapter.js';

/** The authenticated user of a REST request (docs/api.md: X-Authorization or Authorization Bearer). */
export function principalOf(s: Services, ctx: HttpContext): Principal {
  return s.auth.authenticateHeader(ctx.header('x-authorization'), ctx.header('authorization'));
}
