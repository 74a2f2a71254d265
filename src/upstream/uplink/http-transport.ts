/**
 * The HTTP transport: TB's device API (`POST /api/v1/{token}/telemetry|attributes|depth/telemetry`,
 * `POST /api/v1/provision`) over keep-alive connections (client.ts). Telemetry goes through the sync thread
 * (thread.ts) while it runs, which also reads the backlog back and encodes it; the rest from the main thread.
 */
import type { Logger } from '../../log.js';
import type { RefSource } from '../../store/outbox.js';
import { UpstreamClient } from './client.js';
import type { EncodeRequest } from './encode.js';
import { type ReadyGroup, SyncThread } from './thread.js';
import type { ThreadSetup } from './thread-worker.js';
import { type Outcome, type ProvisionResult, type Transport, classify } from './transport.js';

export interface HttpTransportOptions {
  /** the refs' points as the main thread reads them (the sync thread's fallback) */
  readonly refs: RefSource;
  readonly url: string;
  readonly concurrency: number;
  readonly requestTimeoutMs: number;
  /** false: everything in the main thread (config sync.encoderThread) */
  readonly encoderThread: boolean;
  /** what the sync thread opens: the data dir and map size (thread.ts) */
  readonly threadSetup: Pick<ThreadSetup, 'dataDir' | 'mapSizeBytes'>;
  readonly log: Logger;
  readonly maxBatchBytes: number;
}

const path = (token: string, what: string): string => `api/v1/${encodeURIComponent(token)}/${what}`;

export class HttpTransport implements Transport {
  private readonly client: UpstreamClient;
  private readonly thread: SyncThread;
  readonly kind = 'http';
  readonly addressing = 'token';
  private readonly maxBatchBytes: number;

  constructor(o: HttpTransportOptions) {
    this.maxBatchBytes = o.maxBatchBytes;
    this.client = new UpstreamClient(o.url, o.concurrency, o.requestTimeoutMs);
    this.thread = new SyncThread({
      refs: o.refs,
      client: this.client,
      log: o.log,
      thread: o.encoderThread,
      setup: { ...o.threadSetup, url: o.url, concurrency: o.concurrency, requestTimeoutMs: o.requestTimeoutMs },
    });
  }

  bodyLimit(): number {
    return this.maxBatchBytes;
  }

  get url(): string {
    return this.client.url;
  }

  get threaded(): boolean {
    return this.thread.threaded;
  }

  async telemetry(token: string, body: string): Promise<Outcome> {
    return classify(await this.thread.post(path(token, 'telemetry'), body));
  }

  async groupBody(token: string, group: ReadyGroup, i: number): Promise<Outcome> {
    return classify(await this.thread.postBody(group, i, path(token, 'telemetry')));
  }

  encode(req: EncodeRequest): Promise<ReadyGroup> {
    return this.thread.encode(req);
  }

  release(group: ReadyGroup): void {
    this.thread.release(group);
  }

  async attributes(token: string, body: string): Promise<Outcome> {
    return classify(await this.client.post(path(token, 'attributes'), body));
  }

  async depth(token: string, body: string): Promise<Outcome> {
    return classify(await this.client.post(path(token, 'depth/telemetry'), body));
  }

  async provision(deviceName: string, key: string, secret: string): Promise<ProvisionResult> {
    const a = await this.client.post(
      'api/v1/provision',
      JSON.stringify({ deviceName, provisionDeviceKey: key, provisionDeviceSecret: secret }),
    );
    const o = classify(a);
    if (o.kind === 'retry') return o;
    // a refusal of the provisioning path itself is not the device's: backed off, as a 5xx
    if (o.kind !== 'sent')
      return { kind: 'retry', what: o.kind === 'refused' ? o.what : 'HTTP 400', afterMs: undefined };
    let ans: { status?: unknown; credentialsValue?: unknown; errorMsg?: unknown };
    try {
      ans = JSON.parse(a.body) as typeof ans;
    } catch {
      ans = {};
    }
    if (ans.status !== 'SUCCESS' || typeof ans.credentialsValue !== 'string' || ans.credentialsValue === '') {
      return {
        kind: 'denied',
        reason: `provisioning refused: ${String(ans.status ?? 'no status')}${typeof ans.errorMsg === 'string' ? ` (${ans.errorMsg})` : ''}`,
      };
    }
    return { kind: 'token', token: ans.credentialsValue };
  }

  abort(): void {
    // requests in flight fail at once (their entries stay pending)
    this.client.close();
    this.thread.abortRequests();
  }

  close(): Promise<void> {
    return this.thread.close();
  }
}
