/**
 * Entity data queries REST (docs/api.md "Entity data queries"): `POST /api/entitiesQuery/find`, `/count` and the
 * deprecated `/find/keys`, for tenant admins and customer users (a customer user's answers hold only its
 * customer's entities). The query itself is src/query/entity-query.ts.
 */
import type { Principal } from '../../auth/index.js';
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import {
  type QueryScope,
  type QuerySources,
  countEntities,
  findEntityData,
  findEntityKeys,
  parseEntityCountQuery,
  parseEntityDataQuery,
} from '../../query/entity-query.js';
import { isAttributeScope } from '../../store/attributes.js';
import { EntityIndex } from '../../store/entity-index.js';
import { type HttpRouter, json } from '../../uws/adapter.js';
import { principalOf } from '../principal.js';
import { jsonObjectBody } from './params.js';

const scopeOf = (p: Principal): QueryScope => ({
  tenantAdmin: p.authority === 'TENANT_ADMIN',
  customerId: p.customerId,
});

/** `true`/`false` query flags; absent → `dflt` */
function flag(q: URLSearchParams, name: string, dflt: boolean): boolean {
  const v = q.get(name);
  if (v === null || v === '') return dflt;
  if (v !== 'true' && v !== 'false') throw new OutpostError('BAD_PARAM', `Parameter '${name}' must be true or false`);
  return v === 'true';
}

export function registerEntityQueryRoutes(router: HttpRouter, s: Services): void {
  const index = new EntityIndex(s.env);
  const sources: QuerySources = {
    index,
    relations: s.relations,
    timeseries: s.timeseries,
    attributes: s.attributes,
    now: s.now,
    get tenantTitle() {
      return s.entities.tenant()?.title ?? '';
    },
  };

  router.route('post', '/api/entitiesQuery/find', async (ctx) => {
    const p = principalOf(s, ctx);
    const q = parseEntityDataQuery(await jsonObjectBody(ctx));
    return json(findEntityData(sources, scopeOf(p), q));
  });

  router.route('post', '/api/entitiesQuery/count', async (ctx) => {
    const p = principalOf(s, ctx);
    const q = parseEntityCountQuery(await jsonObjectBody(ctx));
    return json(countEntities(sources, scopeOf(p), q));
  });

  router.route('post', '/api/entitiesQuery/find/keys', async (ctx) => {
    const p = principalOf(s, ctx);
    const timeseries = flag(ctx.query, 'timeseries', false);
    const attributes = flag(ctx.query, 'attributes', false);
    const rawScope = ctx.query.get('scope');
    if (rawScope !== null && rawScope !== '' && !isAttributeScope(rawScope))
      throw new OutpostError('BAD_PARAM', `Invalid scope: ${rawScope}`);
    const scope = rawScope === null || rawScope === '' ? undefined : rawScope;
    const q = parseEntityCountQuery(await jsonObjectBody(ctx));
    return json(findEntityKeys(sources, scopeOf(p), q, { timeseries, attributes, scope }));
  });
}
