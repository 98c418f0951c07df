/**
 * Window arithmetic. Windows are half-open, `[start, start + sizeMs)`, with starts aligned to
 * epoch 0 on multiples of the slide: a row exactly at a window's end belongs to the next one.
 */

/** The start of the tumbling window of `sizeMs` holding `time` (works for times before 1970). */
export function tumblingStart(time: number, sizeMs: number): number {
  return Math.floor(time / sizeMs) * sizeMs;
}

/**
 * The starts of every hopping window (`sizeMs` long, one every `slideMs`) holding `time`,
 * earliest first, written into `out` (cleared first).
 */
export function hoppingStarts(time: number, sizeMs: number, slideMs: number, out: number[]): number[] {
  out.length = 0;
  const last = Math.floor(time / slideMs) * slideMs;
  let first = last;
  while (first - slideMs > time - sizeMs) first -= slideMs;
  for (let start = first; start <= last; start += slideMs) out.push(start);
  return out;
}
