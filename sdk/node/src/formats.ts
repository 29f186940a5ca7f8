// The server's (ingest's) rules for IP addresses, UUIDs and timestamps, written out so that
// an event the server would reject fails at the call instead. Each follows the parser the
// server uses: Rust's `IpAddr::from_str`, the `uuid` crate's `Uuid::parse_str` and the
// `time` crate's RFC 3339 parser.

/** Rust's IPv4 syntax: four decimal numbers 0-255, no leading zeros, no other forms. */
function ipv4At(s: string, i: number): number {
  for (let part = 0; part < 4; part++) {
    if (part > 0) {
      if (s.charCodeAt(i) !== 46 /* . */) return -1;
      i++;
    }
    const start = i;
    let value = 0;
    while (i < s.length && i - start < 3) {
      const c = s.charCodeAt(i) - 48;
      if (c < 0 || c > 9) break;
      value = value * 10 + c;
      i++;
    }
    const digits = i - start;
    if (digits === 0 || value > 255 || (digits > 1 && s.charCodeAt(start) === 48)) return -1;
  }
  return i;
}

function hexDigit(code: number): boolean {
  return (code >= 48 && code <= 57) || (code >= 65 && code <= 70) || (code >= 97 && code <= 102);
}

/** Reads up to `limit` groups separated by ':' (the last two may be an IPv4 address). */
function groupsAt(s: string, i: number, limit: number): { end: number; count: number; ipv4: boolean } {
  for (let n = 0; n < limit; n++) {
    const sep = n > 0 ? 1 : 0;
    if (sep && s.charCodeAt(i) !== 58 /* : */) return { end: i, count: n, ipv4: false };
    if (n < limit - 1) {
      const end = ipv4At(s, i + sep);
      if (end >= 0) return { end, count: n + 2, ipv4: true };
    }
    let j = i + sep;
    while (j < s.length && j - (i + sep) < 4 && hexDigit(s.charCodeAt(j))) j++;
    if (j === i + sep) return { end: i, count: n, ipv4: false };
    i = j;
  }
  return { end: i, count: limit, ipv4: false };
}

function isIPv6(s: string): boolean {
  const head = groupsAt(s, 0, 8);
  if (head.count === 8) return head.end === s.length;
  if (head.ipv4 || s.charCodeAt(head.end) !== 58 || s.charCodeAt(head.end + 1) !== 58) return false;
  // "::" stands for at least one group of zeros, so at most 7 - head groups follow.
  const tail = groupsAt(s, head.end + 2, 8 - (head.count + 1));
  return tail.end === s.length;
}

/** An IPv4 or IPv6 address as ingest reads it (no zone ids, no shortened IPv4 forms). */
export function isIpAddress(s: string): boolean {
  return ipv4At(s, 0) === s.length || isIPv6(s);
}

function isHex(s: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!hexDigit(s.charCodeAt(i))) return false;
  return true;
}

function isHyphenated(s: string): boolean {
  return (
    s.length === 36 &&
    s[8] === '-' &&
    s[13] === '-' &&
    s[18] === '-' &&
    s[23] === '-' &&
    isHex(s, 0, 8) &&
    isHex(s, 9, 13) &&
    isHex(s, 14, 18) &&
    isHex(s, 19, 23) &&
    isHex(s, 24, 36)
  );
}

/**
 * A UUID in any form the server reads: `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, 32 hex digits,
 * `{…}` or `urn:uuid:…`, in either case; not the nil UUID.
 */
export function isUuid(s: string): boolean {
  let ok: boolean;
  if (s.length === 32) ok = isHex(s, 0, 32);
  else if (s.length === 36) ok = isHyphenated(s);
  else if (s.length === 38) ok = s[0] === '{' && s[37] === '}' && isHyphenated(s.slice(1, 37));
  else if (s.length === 45) ok = s.slice(0, 9).toLowerCase() === 'urn:uuid:' && isHyphenated(s.slice(9));
  else ok = false;
  return ok && /[1-9a-fA-F]/.test(s.replace(/^urn:uuid:/i, ''));
}

/** Epoch ms of 10000-01-01T00:00:00Z: RFC 3339 has four-digit years. */
export const MAX_TIMESTAMP_MS = 253_402_300_800_000;

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[\x00-\x7f](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Epoch ms of an RFC 3339 date-time as the server's parser reads it, or undefined if it rejects it. */
export function parseRfc3339(s: string): number | undefined {
  const m = RFC3339.exec(s);
  if (m === null) return undefined;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined;
  if (hour > 23 || minute > 59 || second > 60) return undefined;
  let offsetMin = 0;
  if (m[9] !== undefined) {
    const oh = Number(m[10]);
    const om = Number(m[11]);
    if (oh > 23 || om > 59) return undefined;
    offsetMin = (m[9] === '-' ? -1 : 1) * (oh * 60 + om);
  }
  const leap = second === 60;
  const ms = leap ? 999 : m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, '0'));
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, leap ? 59 : second, ms);
  const t = date.getTime() - offsetMin * 60_000;
  if (leap) {
    // A leap second is only valid as the last second of a month, in UTC.
    const u = new Date(t);
    const last = daysInMonth(u.getUTCFullYear(), u.getUTCMonth() + 1);
    if (u.getUTCHours() !== 23 || u.getUTCMinutes() !== 59 || u.getUTCSeconds() !== 59 || u.getUTCDate() !== last) return undefined;
  }
  return t;
}
