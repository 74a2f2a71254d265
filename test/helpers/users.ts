/**
 * Users and JWTs for black-box tests (`outpost user add` in docs/cli.md, login in docs/api.md). Signatures are stable:
 * other test files depend on them.
 */
import { type Gateway, cliJson, http } from './server.js';

export type Authority = 'TENANT_ADMIN' | 'CUSTOMER_USER';

export interface AddedUser {
  id: string;
  email: string;
  authority: Authority;
  customerId: string;
}

/** Creates a user through the CLI; `customer` is a customer id or title (needed for CUSTOMER_USER). */
export async function addUser(
  dataDir: string,
  email: string,
  password: string,
  authority: Authority,
  customer?: string,
): Promise<AddedUser> {
  const args = [
    'user',
    'add',
    '--data-dir',
    dataDir,
    '--email',
    email,
    '--password',
    password,
    '--authority',
    authority,
  ];
  if (customer !== undefined) args.push('--customer', customer);
  return cliJson<AddedUser>(args);
}

export interface TokenPair {
  token: string;
  refreshToken: string;
}

/** Logs in through `POST /api/auth/login`; throws unless the answer is 200 with a token pair. */
export async function login(gw: Pick<Gateway, 'url'>, email: string, password: string): Promise<TokenPair> {
  const r = await http('POST', `${gw.url}/api/auth/login`, { username: email, password });
  if (r.status !== 200) throw new Error(`login ${email} failed: ${r.status} ${r.text}`);
  return r.json<TokenPair>();
}

/** The header TB clients send (docs/api.md). */
export function authHeaders(token: string): { 'X-Authorization': string } {
  return { 'X-Authorization': `Bearer ${token}` };
}

/** Adds a tenant administrator through the CLI and logs in as it: its JWT. */
export async function adminToken(
  gw: Pick<Gateway, 'url' | 'dataDir'>,
  email = 'admin@outpost.test',
  password = 'secret-1',
): Promise<string> {
  await addUser(gw.dataDir, email, password, 'TENANT_ADMIN');
  return (await login(gw, email, password)).token;
}

/** adminToken as the header its requests carry. */
export async function adminHeaders(
  gw: Pick<Gateway, 'url' | 'dataDir'>,
  email?: string,
  password?: string,
): Promise<{ 'X-Authorization': string }> {
  return authHeaders(await adminToken(gw, email, password));
}
