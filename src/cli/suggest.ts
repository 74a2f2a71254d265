/** "Did you mean" for device names (docs/cli.md): the nearest names by edit distance. */

/** Levenshtein distance, case-insensitive (a technician types `Pump-1` for `pump-1`). */
export function editDistance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let prev = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const cur = [i];
    for (let j = 1; j <= y.length; j++) {
      cur[j] = Math.min(
        (prev[j] as number) + 1,
        (cur[j - 1] as number) + 1,
        (prev[j - 1] as number) + (x[i - 1] === y[j - 1] ? 0 : 1),
      );
    }
    prev = cur;
  }
  return prev[y.length] as number;
}

/**
 * Up to `n` names near `query`, nearest first: within a third of the query's length (at least 2 edits), or
 * containing it.
 */
export function nearest(query: string, names: readonly string[], n = 3): string[] {
  const q = query.toLowerCase();
  const bound = Math.max(2, Math.floor(query.length / 3));
  return names
    .map((name) => ({ name, d: editDistance(query, name), sub: name.toLowerCase().includes(q) }))
    .filter((c) => c.d <= bound || c.sub)
    .sort((a, b) => a.d - b.d || (a.name < b.name ? -1 : 1))
    .slice(0, n)
    .map((c) => c.name);
}

/** The one-line error for an unknown device, with suggestions. */
export function unknownDevice(ref: string, names: readonly string[]): string {
  const near = nearest(ref, names);
  return `no device "${ref}"${near.length > 0 ? `; did you mean ${near.map((s) => `"${s}"`).join(', ')}?` : ''}`;
}
