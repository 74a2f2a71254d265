/**
 * Writes a wide CSV through the adapter's StreamReply (docs/api.md "streamed, any size"): rows are written
 * into one reused ~32 KiB byte buffer, each full chunk awaits the socket's backpressure (`sink.write`; uWS
 * copies what it cannot send at once, so the buffer is free again when write returns), and production stops
 * as soon as the client goes away.
 */
import type { Column } from '../../csv/column.js';
import { type WideCsv, wideCsvChunks } from '../../csv/wide.js';
import type { StreamReply, StreamSink } from '../../uws/adapter.js';

/** Bytes per write: large enough to amortise the write call, small enough to keep memory flat. */
export const CHUNK_BYTES = 32 * 1024;

export interface WideTable {
  /** first column's name: ts, ds or last_update_ts */
  readonly positionColumn: string;
  /** (key, column) pairs in column order; columns without any cell are left out (empty range → header only) */
  readonly named: ReadonlyArray<readonly [string, Column]>;
  readonly formatPos: WideCsv['formatPos'];
}

/**
 * The table's CSV in chunks of about CHUNK_BYTES; each is a view of one reused buffer, to be written (or
 * copied) before the next is pulled. The REST download and `outpost export` share it (docs/cli.md: byte for byte).
 */
export function wideTableChunks(table: WideTable): Generator<Buffer, void, undefined> {
  const present = table.named.filter(([, c]) => !c.done);
  const header = [table.positionColumn, ...present.map(([name]) => name)];
  const columns = present.map(([, c]) => c);
  return wideCsvChunks({ header, columns, formatPos: table.formatPos }, CHUNK_BYTES);
}

export function csvAttachment(filename: string, table: WideTable): StreamReply {
  return {
    contentType: 'text/csv',
    headers: { 'Content-Disposition': `attachment; filename="${filename}"` },
    produce: async (sink: StreamSink) => {
      // aborted is checked before each write and again after each wait, before the next chunk is read.
      for (const chunk of wideTableChunks(table)) {
        if (sink.aborted) return;
        await sink.write(chunk);
        if (sink.aborted) return;
      }
    },
  };
}
