import { resolve } from 'node:path';

/** A failure the CLI reports as its one stderr line (docs/cli.md), exit 1. */
export class CliError extends Error {
  override readonly name = 'CliError';
}

/** the line of a local command run where there is no store */
export function noStore(dataDir: string): string {
  return `no store in ${resolve(dataDir)}: give --data-dir DIR (or OUTPOST_DATA_DIR) or --config FILE of a gateway's store, or outpost login --url URL for a remote gateway`;
}
