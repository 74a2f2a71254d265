/**
 * What the sync service needs of the way to the upstream: "send this batch for this device, tell me what
 * became of it". The service decides everything else (what to send, in which order, pacing, back-off,
 * parking, acknowledgements); a transport only carries a body and reduces the upstream's answer to an
 * Outcome. Two implement it: HTTP (http-transport.ts, TB's device API, a device addressed by its token) and
 * MQTT (session/transport.ts, TB's gateway API over one session, a device addressed by its name; PUBACK is
 * `sent`).
 *
 * `classify` is the one place an HTTP status is given a meaning.
 */
import type { UpstreamAnswer } from './client.js';
import type { EncodeRequest } from './encode.js';
import type { ReadyGroup } from './thread.js';

/** What became of one body sent upstream. */
export type Outcome =
  /** taken (2xx): acknowledge it */
  | { readonly kind: 'sent' }
  /** refused as such (400): retrying cannot help; set the batch aside, go on with the rest */
  | { readonly kind: 'setAside'; readonly error: string }
  /**
   * the device's credentials refused (401/403/404): park that device alone. `missing` is a 404 (on the depth
   * path: perhaps no such endpoint upstream, see depth.ts).
   */
  | { readonly kind: 'refused'; readonly what: string; readonly missing: boolean }
  /** the upstream is away or busy (network error, timeout, 5xx, 429): retry after `afterMs` (its Retry-After) or a back-off */
  | { readonly kind: 'retry'; readonly what: string; readonly afterMs: number | undefined };

const SENT: Outcome = { kind: 'sent' };

/** The meaning of an HTTP answer (status 0: a network error or timeout). */
export function classify(a: UpstreamAnswer): Outcome {
  if (a.status >= 200 && a.status < 300) return SENT;
  if (a.status === 400) return { kind: 'setAside', error: a.body.slice(0, 500) };
  const what = a.status === 0 ? (a.error ?? 'network error') : `HTTP ${a.status}`;
  if (a.status === 401 || a.status === 403 || a.status === 404)
    return { kind: 'refused', what, missing: a.status === 404 };
  return { kind: 'retry', what, afterMs: a.status === 429 || a.status === 503 ? a.retryAfterMs : undefined };
}

/**
 * The way upstream. `to` is what the transport addresses a device by (HTTP: the device's access token, which
 * devices.ts holds); a body is TB's JSON for that kind of data.
 */
export interface Transport {
  /** the upstream, as shown in the status and the log */
  readonly url: string;
  readonly kind: 'http' | 'mqtt';
  /**
   * what `to` is: a device's upstream access token (each device has its own credentials), or its name (one
   * gateway session carries every device, which needs no token of its own)
   */
  readonly addressing: 'token' | 'name';
  /** the largest body for `to` that keeps one request or message within sync.maxBatchBytes */
  bodyLimit(to: string): number;
  /** whether encode runs off the main thread (the service then takes its CPU turn after it, not before) */
  readonly threaded: boolean;
  /** a telemetry array (the live lane's, encoded on the main thread) */
  telemetry(to: string, body: string): Promise<Outcome>;
  /** body `i` of a group `encode` made */
  groupBody(to: string, group: ReadyGroup, i: number): Promise<Outcome>;
  /** reads a device's outbox entries back and cuts them into bodies */
  encode(req: EncodeRequest): Promise<ReadyGroup>;
  /** the bodies of a group not sent (a failure stopped it) are of no further use */
  release(group: ReadyGroup): void;
  attributes(to: string, body: string): Promise<Outcome>;
  depth(to: string, body: string): Promise<Outcome>;
  /** a device's credentials from a provisioning key: the token, or why not (`refused` when the upstream said no) */
  provision(deviceName: string, key: string, secret: string): Promise<ProvisionResult>;
  /** ends the requests in flight (they answer `retry`): the service is stopping */
  abort(): void;
  close(): Promise<void>;
}

export type ProvisionResult =
  | { readonly kind: 'token'; readonly token: string }
  /** the upstream answered, and said no: park the device with this reason */
  | { readonly kind: 'denied'; readonly reason: string }
  /** no answer worth the name: back off as for any failure (a refusal of the provisioning path is not the device's) */
  | { readonly kind: 'retry'; readonly what: string; readonly afterMs: number | undefined };
