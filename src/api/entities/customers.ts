/**
 * Customers REST (docs/api.md). Create, update, list, find by title and delete are TENANT_ADMIN only; a customer
 * user may read its own customer.
 */
import type { Services } from '../../context.js';
import { OutpostError } from '../../errors.js';
import { type HttpRouter, json } from '../../uws/adapter.js';
import { type CustomerRecord, pageOf } from '../../store/entities.js';
import { principalOf } from '../principal.js';
import { bodyEntityId, jsonObjectBody, optionalString, parsePageQuery, parseUuid } from './params.js';
import { customerJson } from './render.js';

export function registerCustomerRoutes(router: HttpRouter, s: Services): void {
  router.route('post', '/api/customer', async (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const body = await jsonObjectBody(ctx);
    const id = bodyEntityId(body);
    const title = optionalString(body, 'title');
    if (title === undefined || title.trim() === '')
      throw new OutpostError('BAD_PARAM', 'Customer title should be specified!');
    if (id !== undefined) {
      s.auth.checkAccess(p, 'CUSTOMER', id, 'write');
      return json(customerJson(await s.entities.updateCustomer(id, title)));
    }
    return json(customerJson(await s.entities.createCustomer(title)));
  });

  router.route('get', '/api/customer/:id', (ctx) => {
    const p = principalOf(s, ctx);
    const rec = s.auth.checkAccess(p, 'CUSTOMER', parseUuid(ctx.params[0], 'customerId'), 'read');
    return json(customerJson(rec as CustomerRecord));
  });

  router.route('get', '/api/customers', (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const page = pageOf(
      s.entities.list('CUSTOMER', (c) => c.tenantId === p.tenantId),
      parsePageQuery(ctx.query),
    );
    return json({ ...page, data: page.data.map(customerJson) });
  });

  // TB's getTenantCustomer: an exact, case-sensitive title (titles are unique per tenant), tenant admin only
  router.route('get', '/api/tenant/customers', (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const title = ctx.query.get('customerTitle');
    if (title === null)
      throw new OutpostError('BAD_PARAM', "Required request parameter 'customerTitle' is not present");
    const rec = s.entities.byName('CUSTOMER', title);
    if (rec?.entityType !== 'CUSTOMER' || rec.tenantId !== p.tenantId)
      throw new OutpostError('ENTITY_NOT_FOUND', `Customer with title [${title}] is not found`);
    return json(customerJson(rec));
  });

  // TB semantics: the customer's devices and assets become unassigned, its users are deleted.
  router.route('del', '/api/customer/:id', async (ctx) => {
    const p = principalOf(s, ctx);
    s.auth.requireTenantAdmin(p);
    const rec = s.auth.checkAccess(p, 'CUSTOMER', parseUuid(ctx.params[0], 'customerId'), 'write');
    const deletedUsers = await s.entities.deleteCustomer(rec.id);
    if (deletedUsers === undefined)
      throw new OutpostError('ENTITY_NOT_FOUND', `Customer with id [${rec.id}] is not found`);
    s.auth.forgetUsers(deletedUsers);
    // TB unassigns the alarms of a deleted user
    for (const u of deletedUsers) await s.alarms.unassignUser(u, Date.now());
    s.bus.publish('entityDeleted', { entityType: 'CUSTOMER', entityId: rec.id });
    s.bus.publish('principalsRevoked', { sessionIds: [], userIds: deletedUsers, customerIds: [rec.id] });
    return {};
  });
}
