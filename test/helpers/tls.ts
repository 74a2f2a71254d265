/** A self-signed certificate for the TLS tests: valid for 127.0.0.1 and localhost, so clients verify it properly. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

/** whether `openssl` is on this machine (the TLS tests are skipped, saying so, where it is not) */
export const hasOpenssl = ((): boolean => {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/** Writes `cert.pem` and `key.pem` (RSA 2048, one day) into `dir`. */
export function selfSignedCert(dir: string): { cert: string; key: string } {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  const subject = ['-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'];
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', ...subject],
    {
      stdio: 'ignore',
    },
  );
  return { cert, key };
}
