/** A failure the CLI reports as its one stderr line (docs/cli.md), exit 1. */
export class CliError extends Error {
  override readonly name = 'CliError';
}
