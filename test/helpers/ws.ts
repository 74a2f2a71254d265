/**
 * A websocket test client (the `ws` package) that queues incoming text frames so a test can await them one
 * by one, and exposes the close code/reason. No sleeps: every wait is on an event, bounded by a timeout that
 * fails the test.
 */
import WebSocket from 'ws';

export interface Closed {
  code: number;
  reason: string;
}

export class WsClient {
  private readonly queue: string[] = [];
  private waiter: ((msg: string) => void) | undefined;
  readonly closed: Promise<Closed>;
  /** every frame received so far, in order */
  readonly received: string[] = [];

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data, isBinary) => {
      const text = isBinary ? Buffer.from(data as Buffer).toString('utf8') : String(data);
      this.received.push(text);
      if (this.waiter) {
        const w = this.waiter;
        this.waiter = undefined;
        w(text);
      } else {
        this.queue.push(text);
      }
    });
    this.closed = new Promise((resolve) => {
      socket.on('close', (code, reason) => resolve({ code, reason: reason.toString('utf8') }));
    });
  }

  /** Connects; resolves once open (the server may still close it right after). */
  static connect(url: string, options: WebSocket.ClientOptions = {}): Promise<WsClient> {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, options);
      const client = new WsClient(socket);
      socket.once('open', () => resolve(client));
      socket.once('error', reject);
    });
  }

  send(frame: string | object): void {
    this.socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /** The next text frame, or a rejection after `timeoutMs`. */
  next(timeoutMs = 5000): Promise<string> {
    const queued = this.queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        reject(new Error(`no websocket frame within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiter = (msg) => {
        clearTimeout(timer);
        resolve(msg);
      };
    });
  }

  async nextJson<T = WsReply>(timeoutMs = 5000): Promise<T> {
    return JSON.parse(await this.next(timeoutMs)) as T;
  }

  /** Frames already received and not yet taken. */
  pending(): number {
    return this.queue.length;
  }

  /** Waits for the close, bounded. */
  waitClosed(timeoutMs = 5000): Promise<Closed> {
    return Promise.race([
      this.closed,
      new Promise<Closed>((_, reject) =>
        setTimeout(() => reject(new Error(`socket not closed within ${timeoutMs} ms`)), timeoutMs).unref(),
      ),
    ]);
  }

  close(): void {
    this.socket.close();
  }

  terminate(): void {
    this.socket.terminate();
  }
}

export interface WsReply {
  subscriptionId: number;
  errorCode: number;
  errorMsg: string | null;
  data: Record<string, Array<[number, string | null]>> | null;
  latestValues: Record<string, number>;
}

/** ws URL of a gateway started by startGateway. */
export function wsUrl(gw: { url: string }, path: string): string {
  return gw.url.replace(/^http/, 'ws') + path;
}
