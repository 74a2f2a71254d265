/**
 * Remote mode (docs/cli.md): a gateway's REST API with the stored session (session.ts), its websocket API
 * for `tail`. Answers are passed through as the gateway sent them.
 */
import type { StatusJson } from '../status/index.js';
import {
  type AttributeScopeArg,
  type Backend,
  byName,
  type DeviceRef,
  type DeviceRow,
  type HistoryQuery,
  SCOPE_PARAM,
  type TailPoint,
} from './backend-types.js';
import { ACTIVE_KEY, LAST_ACTIVITY_KEY } from '../device/state.js';
import { CliError } from './errors.js';
import { RemoteSession } from './session.js';

interface DeviceJson {
  id: { id: string };
  name: string;
  type: string;
  customerId: { id: string };
  deviceProfileId?: { id: string };
}
interface Page<T> {
  data: T[];
  hasNext: boolean;
}

const NULL_UUID = '13814000-1dd2-11b2-8080-808080808080';
/** devices asked for at once while listing: a gateway holds tens to hundreds */
const PAGE_SIZE = 1000;
/** `tail`'s reconnection back-off: the first wait, doubled up to the last */
const TAIL_RETRY_FIRST_MS = 1000;
const TAIL_RETRY_MAX_MS = 30_000;
/** parallel requests for the per-device figures of `devices` */
const PARALLEL = 8;

const keysParam = (keys: readonly string[]): string => keys.map(encodeURIComponent).join(',');

export class RemoteBackend implements Backend {
  readonly mode = 'remote';
  get where(): string {
    return `gateway ${this.s.url}`;
  }
  /** the line naming the gateway that answers (docs/cli.md): who may mistake one gateway for another */
  get header(): string {
    return `gateway ${this.s.url} (${this.s.email})`;
  }
  get url(): string {
    return this.s.url;
  }
  private constructor(private readonly s: RemoteSession) {}

  static open(url: string): RemoteBackend {
    return new RemoteBackend(RemoteSession.open(url));
  }

  private async json<T>(path: string): Promise<T> {
    return JSON.parse((await this.s.request('GET', path)).text) as T;
  }

  private async listDevices(): Promise<DeviceJson[]> {
    const out: DeviceJson[] = [];
    const base =
      this.s.authority === 'TENANT_ADMIN' ? '/api/tenant/devices' : `/api/customer/${this.s.customerId}/devices`;
    for (let page = 0; ; page++) {
      const p = await this.json<Page<DeviceJson>>(`${base}?pageSize=${PAGE_SIZE}&page=${page}`);
      out.push(...p.data);
      if (!p.hasNext) return out;
    }
  }

  async deviceRefs(): Promise<DeviceRef[]> {
    return (await this.listDevices()).map((d) => ({ id: d.id.id, name: d.name })).sort(byName);
  }

  async devices(): Promise<DeviceRow[]> {
    const list = await this.listDevices();
    const titles = new Map<string, string>();
    for (const cid of new Set(list.map((d) => d.customerId.id).filter((c) => c !== NULL_UUID))) {
      titles.set(cid, (await this.json<{ title: string }>(`/api/customer/${cid}`)).title);
    }
    const profiles = new Map<string, string>();
    for (const pid of new Set(list.map((d) => d.deviceProfileId?.id).filter((p) => p !== undefined))) {
      const info = await this.s.request('GET', `/api/deviceProfileInfo/${pid}`, { accept: [403, 404] });
      if (info.status === 200) profiles.set(pid, (JSON.parse(info.text) as { name: string }).name);
    }
    const rows = await mapLimit(list, PARALLEL, async (d): Promise<DeviceRow> => {
      const attrs = JSON.parse(
        (
          await this.s.request(
            'GET',
            `/api/plugins/telemetry/DEVICE/${d.id.id}/values/attributes/SERVER_SCOPE?keys=${LAST_ACTIVITY_KEY},${ACTIVE_KEY}`,
          )
        ).text,
      ) as Array<{ key: string; value: unknown; lastUpdateTs: number }>;
      const activity = attrs.find((a) => a.key === LAST_ACTIVITY_KEY)?.value;
      const active = attrs.find((a) => a.key === ACTIVE_KEY);
      return {
        id: d.id.id,
        name: d.name,
        type: d.type,
        profile: profiles.get(d.deviceProfileId?.id ?? '') ?? d.type,
        customer: titles.get(d.customerId.id) ?? null,
        lastActivityTs: typeof activity === 'number' ? activity : null,
        active: typeof active?.value === 'boolean' ? active.value : null,
        activeSinceTs: typeof active?.value === 'boolean' ? active.lastUpdateTs : null,
      };
    });
    return rows.sort(byName);
  }

  async latest(deviceId: string, keys: readonly string[] | undefined): Promise<string> {
    const q = keys === undefined || keys.length === 0 ? '' : `?keys=${keysParam(keys)}`;
    return (await this.s.request('GET', `/api/plugins/telemetry/DEVICE/${deviceId}/values/timeseries${q}`)).text;
  }

  async history(deviceId: string, keys: readonly string[], q: HistoryQuery): Promise<string> {
    const params =
      `keys=${keysParam(keys)}&startTs=${q.startTs}&endTs=${q.endTs}&interval=${q.interval}&agg=${q.agg}&orderBy=${q.order ?? 'ASC'}` +
      (q.limit === undefined ? '' : `&limit=${q.limit}`);
    return (await this.s.request('GET', `/api/plugins/telemetry/DEVICE/${deviceId}/values/timeseries?${params}`)).text;
  }

  async exportCsv(
    deviceId: string,
    type: 'ts' | 'ds',
    start: number,
    end: number,
    keys: readonly string[] | undefined,
    write: (chunk: Buffer) => Promise<void>,
  ): Promise<void> {
    await this.s.request(
      'GET',
      `/api/download/deviceSeriesData?deviceId=${deviceId}&type=${type}&startValue=${start}&endValue=${end}${keys === undefined ? '' : `&keys=${keysParam(keys)}`}`,
      { onChunk: write, timeoutMs: 24 * 3_600_000 },
    );
  }

  async credentials(deviceId: string): Promise<string> {
    return (await this.s.request('GET', `/api/device/${deviceId}/credentials`)).text;
  }

  async attributes(deviceId: string, scope: AttributeScopeArg | undefined): Promise<string> {
    const s = scope === undefined ? '' : `/${SCOPE_PARAM[scope]}`;
    return (await this.s.request('GET', `/api/plugins/telemetry/DEVICE/${deviceId}/values/attributes${s}`)).text;
  }

  async rpc(
    deviceId: string,
    method: string,
    paramsJson: string,
    oneway: boolean,
    timeoutMs: number | undefined,
  ): Promise<string> {
    const body = `{"method":${JSON.stringify(method)},"params":${paramsJson}${timeoutMs === undefined ? '' : `,"timeout":${timeoutMs}`}}`;
    const a = await this.s.request('POST', `/api/plugins/rpc/${oneway ? 'oneway' : 'twoway'}/${deviceId}`, {
      body,
      timeoutMs: (timeoutMs ?? 10_000) + 30_000,
      accept: [408, 409],
    });
    // TB answers these with empty bodies: say what happened
    if (a.status === 409) {
      throw new CliError(
        `rpc ${method} not delivered: the device did not poll for RPC (HTTP long-poll or MQTT subscription) before the timeout`,
      );
    }
    if (a.status === 408)
      throw new CliError(`rpc ${method} delivered, but the device sent no reply before the timeout`);
    return a.text;
  }

  /**
   * One tsSubCmd (the websocket API, docs/api.md); its first reply (the current values) is skipped, every later
   * frame printed. When the connection drops (the daemon restarts), it reconnects with a back-off of 1 s doubling
   * to 30 s, saying so on stderr, until `signal` aborts; a refusal by the gateway (an error frame) ends it.
   */
  async tail(
    deviceId: string,
    keys: readonly string[] | undefined,
    onPoint: (p: TailPoint) => void,
    signal: AbortSignal,
    onReady?: () => void,
  ): Promise<void> {
    const { default: WebSocket } = await import('ws');
    let backoffMs = TAIL_RETRY_FIRST_MS;
    let announced = false;
    for (;;) {
      const token = await this.s.token().catch((err: unknown) => {
        if (announced) return undefined;
        throw err;
      });
      const outcome =
        token === undefined
          ? ({ lost: 'no token' } as const)
          : await this.tailOnce(WebSocket, token, deviceId, keys, onPoint, signal, () => {
              backoffMs = TAIL_RETRY_FIRST_MS;
              if (announced) process.stderr.write(`tail: reconnected to ${this.s.url}\n`);
              else onReady?.();
              announced = true;
            });
      if (outcome === 'stopped' || signal.aborted) return;
      if (!announced) throw new CliError(`tail: ${outcome.lost}`);
      process.stderr.write(`tail: lost the connection (${outcome.lost}); reconnecting in ${backoffMs / 1000} s\n`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, backoffMs);
        signal.addEventListener(
          'abort',
          () => {
            clearTimeout(timer);
            resolve();
          },
          { once: true },
        );
      });
      if (signal.aborted) return;
      backoffMs = Math.min(TAIL_RETRY_MAX_MS, backoffMs * 2);
    }
  }

  /** One websocket connection of `tail`: 'stopped' when aborted, else why it was lost; a refusal rejects. */
  private tailOnce(
    WebSocket: typeof import('ws').default,
    token: string,
    deviceId: string,
    keys: readonly string[] | undefined,
    onPoint: (p: TailPoint) => void,
    signal: AbortSignal,
    onLive: () => void,
  ): Promise<'stopped' | { lost: string }> {
    const wsUrl = `${this.s.url.replace(/^http/, 'ws')}/api/ws/plugins/telemetry?token=${encodeURIComponent(token)}`;
    const ws = new WebSocket(wsUrl);
    return new Promise((resolve, reject) => {
      let first = true;
      let lost = '';
      const abort = (): void => ws.close();
      signal.addEventListener('abort', abort, { once: true });
      ws.on('open', () => {
        ws.send(
          JSON.stringify({
            tsSubCmds: [
              { cmdId: 1, entityType: 'DEVICE', entityId: deviceId, ...(keys ? { keys: keys.join(',') } : {}) },
            ],
          }),
        );
      });
      ws.on('message', (raw: Buffer) => {
        const f = JSON.parse(raw.toString('utf8')) as {
          errorCode: number;
          errorMsg: string | null;
          data: Record<string, Array<[number, string]>> | null;
        };
        if (f.errorCode !== 0) {
          signal.removeEventListener('abort', abort);
          ws.close();
          reject(new CliError(`tail: ${f.errorMsg ?? 'refused'}`));
          return;
        }
        // the subscription's first frame (the current values) means it is live
        if (first) {
          first = false;
          onLive();
          return;
        }
        const pts: TailPoint[] = [];
        for (const [key, list] of Object.entries(f.data ?? {}))
          for (const [ts, value] of list) pts.push({ ts, key, value });
        pts.sort((a, b) => a.ts - b.ts || (a.key < b.key ? -1 : 1));
        for (const p of pts) onPoint(p);
      });
      ws.on('close', (code: number, reason: Buffer) => {
        signal.removeEventListener('abort', abort);
        if (signal.aborted) resolve('stopped');
        else
          resolve({
            lost: lost || `the gateway closed the websocket (${code}${reason.length ? ` ${reason.toString()}` : ''})`,
          });
      });
      ws.on('error', (err: Error) => {
        lost = err.message;
      });
    });
  }

  /** `POST /api/customer`: `{"id","title"}` as `customer add` prints locally */
  async addCustomer(title: string): Promise<{ id: string; title: string }> {
    const c = JSON.parse((await this.s.request('POST', '/api/customer', { body: JSON.stringify({ title }) })).text) as {
      id: { id: string };
      title: string;
    };
    return { id: c.id.id, title: c.title };
  }

  /**
   * `POST /api/device[?accessToken=]`, then `POST /api/customer/{c}/device/{id}` for a customer (by id or title,
   * exact then in any case, as locally; checked before the device is made): `{"id","name","token"}`.
   */
  async addDevice(o: {
    name: string;
    type: string;
    token?: string | undefined;
    customer?: string | undefined;
    gateway: boolean;
  }): Promise<{ id: string; name: string; token: string }> {
    const customerId = o.customer === undefined ? undefined : await this.customerIdOf(o.customer);
    const body = JSON.stringify({
      name: o.name,
      type: o.type,
      ...(o.gateway ? { additionalInfo: { gateway: true } } : {}),
    });
    const q = o.token === undefined ? '' : `?accessToken=${encodeURIComponent(o.token)}`;
    const d = JSON.parse((await this.s.request('POST', `/api/device${q}`, { body })).text) as {
      id: { id: string };
      name: string;
    };
    if (customerId !== undefined) await this.s.request('POST', `/api/customer/${customerId}/device/${d.id.id}`);
    const creds = JSON.parse(await this.credentials(d.id.id)) as { credentialsId: string };
    return { id: d.id.id, name: d.name, token: creds.credentialsId };
  }

  private async customerIdOf(ref: string): Promise<string> {
    const all = await this.json<Page<{ id: { id: string }; title: string }>>('/api/customers?pageSize=1000&page=0');
    const folded = ref.toLowerCase();
    const c =
      all.data.find((x) => x.id.id === ref || x.title === ref) ??
      all.data.find((x) => x.title.toLowerCase() === folded);
    if (c === undefined) throw new CliError(`no customer with id or title "${ref}"`);
    return c.id.id;
  }

  /** renames a device: TB's update, `POST /api/device` with its id (docs/api.md); the name it now has */
  async renameDevice(deviceId: string, name: string): Promise<string> {
    const body = JSON.stringify({ id: { entityType: 'DEVICE', id: deviceId }, name });
    return (JSON.parse((await this.s.request('POST', '/api/device', { body })).text) as { name: string }).name;
  }

  /** `DELETE /api/device/{id}`: the device, its data and its sessions go */
  async deleteDevice(deviceId: string): Promise<void> {
    await this.s.request('DELETE', `/api/device/${deviceId}`);
  }

  /** `POST .../attributes/{scope}` with `body` as given (the gateway checks it, as for any REST client) */
  async saveAttributes(deviceId: string, scope: string, body: string): Promise<void> {
    await this.s.request('POST', `/api/plugins/telemetry/DEVICE/${deviceId}/attributes/${scope}`, { body });
  }

  /** `DELETE .../{scope}?keys=` */
  async deleteAttributes(deviceId: string, scope: string, keys: readonly string[]): Promise<void> {
    await this.s.request('DELETE', `/api/plugins/telemetry/DEVICE/${deviceId}/${scope}?keys=${keysParam(keys)}`);
  }

  async alarms(deviceId: string | undefined, query: string): Promise<string> {
    const path = deviceId === undefined ? '/api/alarms' : `/api/alarm/DEVICE/${deviceId}`;
    return (await this.s.request('GET', `${path}?${query}`)).text;
  }

  async status(): Promise<StatusJson> {
    return this.json<StatusJson>('/api/outpost/status');
  }

  /** the batches set aside: listed, retried or cleared (`outpost sync --set-aside` ...); the answer's text */
  async syncSetAside(what: 'list' | 'retry' | 'clear'): Promise<string> {
    const [method, path] =
      what === 'list'
        ? ['GET', '/api/outpost/sync/setAside']
        : what === 'retry'
          ? ['POST', '/api/outpost/sync/setAside/retry']
          : ['DELETE', '/api/outpost/sync/setAside'];
    return (await this.s.request(method, path)).text;
  }

  /** REST `GET /api/outpost/sync` text (`outpost sync`) */
  async syncStatus(): Promise<string> {
    return (await this.s.request('GET', '/api/outpost/sync')).text;
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
