/**
 * Micro-benchmark of token verification (token verification must not be a hot-path cost; figures in BENCHMARKS.md).
 * In-process, loopback-free and bounded: each case runs ROUNDS rounds of at most ROUND_MS ms (or MAX_OPS
 * operations), and the table reports the median round, with the ratio to the baseline measured in the same
 * run (our HS512 verifyJwt).
 *
 * Cases: HS512 verifyJwt (node:crypto HMAC); AuthService.authenticateToken on a cache hit (what a request
 * costs once its token was seen); node:crypto Ed25519 verify; tweetnacl Ed25519 verify (pure JS).
 *
 * Run: npm run build && npm run bench:auth
 */
import { generateKeyPairSync, sign as edSign, verify as edVerify } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import nacl from 'tweetnacl';
import { AuthService } from '../../src/auth/index.js';
import { loadSigningKey, verifyJwt } from '../../src/auth/jwt.js';
import { loadConfig } from '../../src/config/index.js';
import { EntityStore } from '../../src/store/entities.js';
import { openStoreEnv } from '../../src/store/env.js';

/** ms per round */
const ROUND_MS = 400;
const ROUNDS = 5;
/** operations per round at most, so a very fast case cannot run away */
const MAX_OPS = 2_000_000;

interface Result {
  readonly name: string;
  readonly opsPerSec: number;
  readonly usPerOp: number;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

/** Median ops/s over ROUNDS rounds; `op` must return true (checked, so nothing is optimised away or silently failing). */
function measure(name: string, op: () => boolean): Result {
  for (let i = 0; i < 3; i++) if (!op()) throw new Error(`${name}: operation failed during warm-up`);
  const rates: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    let ops = 0;
    const start = process.hrtime.bigint();
    const deadline = start + BigInt(ROUND_MS) * 1_000_000n;
    let now = start;
    while (ops < MAX_OPS) {
      // check the clock every 64 ops: hrtime itself costs about as much as a cache hit
      for (let i = 0; i < 64; i++) {
        if (!op()) throw new Error(`${name}: operation failed`);
      }
      ops += 64;
      now = process.hrtime.bigint();
      if (now >= deadline) break;
    }
    rates.push(ops / (Number(now - start) / 1e9));
  }
  const opsPerSec = median(rates);
  return { name, opsPerSec, usPerOp: 1e6 / opsPerSec };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-auth-'));
  const env = openStoreEnv({ dataDir: dir, mapSizeBytes: 256 * 1024 * 1024 });
  try {
    const config = loadConfig({ dataDir: dir }, {});
    const entities = new EntityStore(env);
    await entities.ensureTenant();
    const user = await entities.createUser({
      email: 'bench@example.com',
      passwordHash: 'unused',
      authority: 'TENANT_ADMIN',
    });
    const auth = new AuthService(config, env, entities);
    const { token } = auth.issue(user);
    const key = loadSigningKey(dir);
    const nowSec = Math.floor(Date.now() / 1000);
    auth.authenticateToken(token);

    // Ed25519 over the same signing input a JWT carries (header.payload), so message sizes match.
    const signingInput = Buffer.from(token.slice(0, token.lastIndexOf('.')));
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const nodeSig = edSign(null, signingInput, privateKey);
    const naclPair = nacl.sign.keyPair.fromSeed(new Uint8Array(32).fill(9));
    const naclSig = nacl.sign.detached(signingInput, naclPair.secretKey);

    const results = [
      measure('HS512 verifyJwt (baseline)', () => verifyJwt(token, key, nowSec).ok),
      measure('AuthService cache hit', () => auth.authenticateToken(token).userId === user.id),
      measure('Ed25519 verify, node:crypto', () => edVerify(null, signingInput, publicKey, nodeSig)),
      measure('Ed25519 verify, tweetnacl', () => nacl.sign.detached.verify(signingInput, naclSig, naclPair.publicKey)),
    ];
    const base = results[0] as Result;
    const rows = results.map((r) => [
      r.name,
      Math.round(r.opsPerSec).toLocaleString('en-US'),
      r.usPerOp < 10 ? r.usPerOp.toFixed(2) : r.usPerOp.toFixed(1),
      `${(r.usPerOp / base.usPerOp).toFixed(r.usPerOp / base.usPerOp < 1 ? 3 : 1)}×`,
    ]);
    console.log(
      `token: ${token.length} bytes; median of ${ROUNDS} rounds of ${ROUND_MS} ms each; Node ${process.version}`,
    );
    console.log('');
    console.log('| operation | ops/s (median) | µs/op (median) | time vs HS512 verify |');
    console.log('|---|---:|---:|---:|');
    for (const r of rows) console.log(`| ${r.join(' | ')} |`);
  } finally {
    await env.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
