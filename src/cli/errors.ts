/** A failure the CLI reports as its one stderr line (CONTRACT §10), exit 1. */
export class CliError extends Error {
  override readonly name = 'CliError';
}
