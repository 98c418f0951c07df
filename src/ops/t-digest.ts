/**
 * A merging t-digest (Dunning and Ertl, "Computing extremely accurate quantiles using
 * t-digests", 2019) for `percentile` past its exact bound: centroids (mean, count) sized by the
 * k1 scale function with compression δ = 200 (at most about 200 centroids), and a buffer of raw
 * values merged in when it fills. Deterministic (no randomness), so a digest restored from the
 * changelog goes on exactly as the original. Accuracy is relative to rank: tightest at the tails
 * (q near 0 or 1), loosest around the median; docs/operators.md quotes measured errors.
 */
export const COMPRESSION = 200;
const BUFFER = 5 * COMPRESSION;

export interface Digest {
  /** Centroid means, ascending, and their counts (parallel arrays). */
  means: number[];
  counts: number[];
  /** Values not merged in yet. */
  buffer: number[];
  min: number;
  max: number;
}

export const newDigest = (): Digest => ({ means: [], counts: [], buffer: [], min: Infinity, max: -Infinity });

export function digestAdd(d: Digest, x: number): void {
  d.buffer.push(x);
  if (x < d.min) d.min = x;
  if (x > d.max) d.max = x;
  if (d.buffer.length >= BUFFER) compress(d);
}

/** Folds `other` into `into`. */
export function digestMerge(into: Digest, other: Digest): void {
  compress(other);
  for (let i = 0; i < other.means.length; i++) into.means.push(other.means[i]!), into.counts.push(other.counts[i]!);
  if (other.min < into.min) into.min = other.min;
  if (other.max > into.max) into.max = other.max;
  // Re-sort the centroids with the buffer and merge them all.
  compress(into, true);
}

/** The k1 scale function: k(q) = δ / (2π) · asin(2q − 1). */
const k1 = (q: number) => (COMPRESSION / (2 * Math.PI)) * Math.asin(2 * q - 1);

/** Merges the buffer (and, with `resort`, unsorted centroids) into centroids that respect the scale function. */
function compress(d: Digest, resort = false): void {
  if (d.buffer.length === 0 && !resort) return;
  const items: Array<[number, number]> = [];
  for (let i = 0; i < d.means.length; i++) items.push([d.means[i]!, d.counts[i]!]);
  for (const x of d.buffer) items.push([x, 1]);
  // Ties by count, so that the order (and the result) never depends on how the items came.
  if (items.length === 0) return;
  items.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const total = items.reduce((s, [, c]) => s + c, 0);
  const means: number[] = [];
  const counts: number[] = [];
  let seen = 0;
  let limit = k1(0) + 1;
  let [mean, count] = items[0]!;
  for (let i = 1; i < items.length; i++) {
    const [x, c] = items[i]!;
    const q = (seen + count + c) / total;
    if (k1(q) <= limit) {
      count += c;
      mean += ((x - mean) * c) / count;
    } else {
      means.push(mean);
      counts.push(count);
      seen += count;
      limit = k1(seen / total) + 1;
      [mean, count] = [x, c];
    }
  }
  means.push(mean);
  counts.push(count);
  d.means = means;
  d.counts = counts;
  d.buffer = [];
}

/** The q-quantile (0 ≤ q ≤ 1), interpolating between centroids; null for an empty digest. Leaves `digest` as it is. */
export function digestQuantile(digest: Digest, q: number): number | null {
  // On a copy: a read must not change when the buffer is merged (a restored digest would then drift from the original).
  const d: Digest = { ...digest, means: [...digest.means], counts: [...digest.counts], buffer: [...digest.buffer] };
  compress(d);
  const n = d.counts.reduce((s, c) => s + c, 0);
  if (n === 0) return null;
  if (q <= 0) return d.min;
  if (q >= 1) return d.max;
  const rank = q * n;
  // Each centroid's mass sits around its mean: the i-th covers ranks [seen, seen + count), centred.
  let seen = 0;
  for (let i = 0; i < d.means.length; i++) {
    const c = d.counts[i]!;
    const centre = seen + c / 2;
    if (rank < centre) {
      if (i === 0) return d.min + ((d.means[0]! - d.min) * rank) / Math.max(centre, 1e-300);
      const prevCentre = seen - d.counts[i - 1]! / 2;
      return d.means[i - 1]! + ((d.means[i]! - d.means[i - 1]!) * (rank - prevCentre)) / (centre - prevCentre);
    }
    seen += c;
  }
  const last = d.means.length - 1;
  const lastCentre = n - d.counts[last]! / 2;
  return d.means[last]! + ((d.max - d.means[last]!) * (rank - lastCentre)) / Math.max(n - lastCentre, 1e-300);
}
