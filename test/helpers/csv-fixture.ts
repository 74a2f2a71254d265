/**
 * A gateway with the users and devices the depth and download tests need (docs/api.md access rules):
 * a tenant admin, a customer "Acme" with its user and device, another customer's user, and an unassigned
 * device. Everything goes through the CLI and REST, like a real installation.
 */
import { type Gateway, addDevice, cliJson, startGateway, type Teardown } from './server.js';
import { addUser, login } from './users.js';

export interface CsvFixture {
  gw: Gateway;
  dev: { id: string; token: string };
  acmeDev: { id: string; token: string };
  admin: string;
  acmeUser: string;
  otherUser: string;
}

/** `full: false` makes only the admin and the unassigned device (faster: each CLI call is a process + scrypt). */
export async function csvFixture(t: Teardown, full = true): Promise<CsvFixture> {
  const gw = await startGateway(t);
  const d = gw.dataDir;
  const dev = await addDevice(d, 'rig-1');
  await addUser(d, 'admin@example.com', 'secret-admin', 'TENANT_ADMIN');
  if (!full) {
    const admin = await login(gw, 'admin@example.com', 'secret-admin');
    return { gw, dev, acmeDev: dev, admin: admin.token, acmeUser: admin.token, otherUser: admin.token };
  }
  await cliJson(['customer', 'add', '--data-dir', d, '--title', 'Acme']);
  await cliJson(['customer', 'add', '--data-dir', d, '--title', 'Other']);
  const acmeDev = await addDevice(d, 'rig-acme', ['--customer', 'Acme']);
  await addUser(d, 'acme@example.com', 'secret-acme', 'CUSTOMER_USER', 'Acme');
  await addUser(d, 'other@example.com', 'secret-other', 'CUSTOMER_USER', 'Other');
  const [admin, acmeUser, otherUser] = await Promise.all([
    login(gw, 'admin@example.com', 'secret-admin'),
    login(gw, 'acme@example.com', 'secret-acme'),
    login(gw, 'other@example.com', 'secret-other'),
  ]);
  return { gw, dev, acmeDev, admin: admin.token, acmeUser: acmeUser.token, otherUser: otherUser.token };
}

/** `Authorization: Bearer` — the header Tempus' downloads use (docs/api.md). */
export const bearer = (token: string): Record<string, string> => ({ Authorization: `Bearer ${token}` });
