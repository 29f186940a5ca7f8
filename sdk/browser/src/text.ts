// Strings cut to the limits ingest enforces: an event with one field over its limit is
// rejected whole (400), so the script shortens rather than loses the event.

/**
 * `s` cut to at most `max` UTF-16 code units (none when `max` is negative). A surrogate
 * pair cut in half is dropped: ingest rejects a lone surrogate as invalid JSON.
 */
export function cut(s: string, max: number): string {
  return s.length > max ? s.substring(0, max).replace(/[\ud800-\udbff]$/, '') : s;
}

/**
 * The JSON of `o` in at most `max` characters: the string fields named in `order` are
 * shortened, in that order, until it fits. A field loses its share of what is over, in
 * proportion to its length in JSON (escapes take two characters or more), so that a
 * string full of quotes is not cut to nothing; a few rounds settle the rest. JavaScript's
 * length (UTF-16 units) is never below ingest's count (Unicode scalar values), so what
 * fits here fits there.
 */
export function fitJson(
  o: Record<string, string | number | undefined>,
  max: number,
  order: string[],
): string {
  for (const key of order) {
    let over: number;
    let value: unknown;
    while ((over = JSON.stringify(o).length - max) > 0 && typeof (value = o[key]) == 'string' && value)
      o[key] = cut(
        value,
        value.length - Math.ceil((over * value.length) / (JSON.stringify(value).length - 2)),
      );
  }
  return JSON.stringify(o);
}
