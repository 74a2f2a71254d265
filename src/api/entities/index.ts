/** Devices, device profiles, customers, assets, relations and alarms REST (docs/api.md). */
import type { Services } from '../../context.js';
import type { HttpRouter } from '../../uws/adapter.js';
import { registerAlarmRoutes } from './alarms.js';
import { registerCredentialsRoutes } from './credentials.js';
import { registerCustomerRoutes } from './customers.js';
import { registerNamedRoutes } from './named.js';
import { registerProfileRoutes } from './profiles.js';
import { registerEntityQueryRoutes } from './query.js';
import { registerRelationRoutes } from './relations.js';

export function registerEntityApi(router: HttpRouter, s: Services): void {
  registerNamedRoutes(router, s, 'DEVICE');
  registerNamedRoutes(router, s, 'ASSET');
  registerCustomerRoutes(router, s);
  registerProfileRoutes(router, s);
  registerCredentialsRoutes(router, s);
  registerRelationRoutes(router, s);
  registerAlarmRoutes(router, s);
  registerEntityQueryRoutes(router, s);
}
