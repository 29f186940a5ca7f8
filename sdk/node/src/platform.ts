/**
 * What the tracker needs from its runtime beyond `fetch` and timers. The web version below
 * uses only globals that Node 20+, Bun, Deno and edge runtimes share (Web Crypto,
 * CompressionStream); `node.ts` swaps in Node's modules where they are faster or, on
 * Node 18, the only ones there.
 */
export interface Platform {
  /** A random (version 4) UUID. */
  randomUUID: () => string;
  /** gzip, or undefined when the runtime has no way to do it (bodies then go uncompressed). */
  gzip: ((body: string) => Promise<Uint8Array>) | undefined;
}

interface WebCrypto {
  randomUUID?: () => string;
  getRandomValues?: (array: Uint8Array) => Uint8Array;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** A version 4 UUID from 16 random bytes (RFC 9562, section 5.4). */
export function uuidFromBytes(b: Uint8Array): string {
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = (i: number): string => HEX[b[i]!]!;
  return `${h(0)}${h(1)}${h(2)}${h(3)}-${h(4)}${h(5)}-${h(6)}${h(7)}-${h(8)}${h(9)}-${h(10)}${h(11)}${h(12)}${h(13)}${h(14)}${h(15)}`;
}

/** Web Crypto's UUID, or one made from its random bytes; undefined without Web Crypto. */
export function webRandomUUID(): (() => string) | undefined {
  const crypto = (globalThis as { crypto?: WebCrypto }).crypto;
  if (typeof crypto?.randomUUID === 'function') return () => crypto.randomUUID!();
  if (typeof crypto?.getRandomValues === 'function') return () => uuidFromBytes(crypto.getRandomValues!(new Uint8Array(16)));
  return undefined;
}

interface CompressionStreamLike {
  readable: unknown;
  writable: { getWriter(): { write(chunk: Uint8Array): Promise<void>; close(): Promise<void> } };
}

/** gzip with the standard CompressionStream, where the runtime has it. */
export function webGzip(): ((body: string) => Promise<Uint8Array>) | undefined {
  const g = globalThis as {
    CompressionStream?: new (format: 'gzip') => CompressionStreamLike;
    Response?: new (body: unknown) => { arrayBuffer(): Promise<ArrayBuffer> };
    TextEncoder?: new () => { encode(s: string): Uint8Array };
  };
  const { CompressionStream, Response, TextEncoder } = g;
  if (CompressionStream === undefined || Response === undefined || TextEncoder === undefined) return undefined;
  const encoder = new TextEncoder();
  return async (body) => {
    const stream = new CompressionStream('gzip');
    const writer = stream.writable.getWriter();
    // Not awaited in turn: the readable side must be drained while the writes go in.
    const written = writer.write(encoder.encode(body)).then(() => writer.close());
    const out = new Uint8Array(await new Response(stream.readable).arrayBuffer());
    await written;
    return out;
  };
}

/** The platform of any runtime with Web Crypto; throws a clear error without it. */
export function webPlatform(): Platform | undefined {
  const randomUUID = webRandomUUID();
  if (randomUUID === undefined) return undefined;
  return { randomUUID, gzip: webGzip() };
}
