/**
 * The store's files hold users, password hashes and device tokens: they are the owner's alone (0600) whatever
 * the umask of whoever created them (a technician's shell is often 022). The installer's directory is 0700 and
 * its unit's UMask=0077 already; this covers a store made by `outpost serve` or `outpost user add` by hand.
 */
import { chmodSync } from 'node:fs';

export function restrictToOwner(...files: string[]): void {
  for (const f of files) {
    try {
      chmodSync(f, 0o600);
    } catch {
      // not ours (root's read-only look at the service user's store) or not there: nothing to tighten
    }
  }
}
