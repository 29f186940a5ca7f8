// A small fake of the browser for the unit tests: just what script.js touches (location,
// history, document, navigator, screen, localStorage, fetch, performance and
// PerformanceObserver, event listeners), with every request recorded.
import { start, type RivuletApi } from '../../src/tracker.js';

/** A request the script made. `body` is the parsed JSON it sent. */
export interface Sent {
  via: 'beacon' | 'fetch';
  url: string;
  body: Record<string, unknown>;
  init?: RequestInit;
}

/** What happens to sendBeacon: it queues (true), refuses (false), is missing, or throws. */
export type Beacon = 'queue' | 'refuse' | 'missing' | 'throw';

export interface FakeOptions {
  url?: string;
  src?: string;
  /** data-* attributes of the script tag, without the data- prefix. */
  attrs?: Record<string, string>;
  title?: string;
  referrer?: string;
  beacon?: Beacon;
  storage?: Record<string, string> | 'throws';
  prerendering?: boolean;
  /** Entry types PerformanceObserver supports; none means no PerformanceObserver at all. */
  observable?: string[];
  /** The performance timeline's entries, by type (getEntriesByType; getEntriesByName reads them too). */
  timeline?: Record<string, object[]>;
}

type Listener = (event: any) => void;

/** addEventListener and a way to fire events at the listeners, in order. */
class Listeners {
  private readonly map = new Map<string, Listener[]>();
  addEventListener = (type: string, fn: Listener) => {
    this.map.set(type, [...(this.map.get(type) ?? []), fn]);
  };
  fire(type: string, event: object = {}): void {
    for (const fn of this.map.get(type) ?? []) fn({ type, ...event });
  }
  count(type: string): number {
    return this.map.get(type)?.length ?? 0;
  }
}

/** A PerformanceObserver whose entries the test hands over with deliver(). */
export class FakeObserver {
  static supportedEntryTypes: string[] = [];
  static all: FakeObserver[] = [];
  readonly types: string[] = [];
  options: object[] = [];
  pending: object[] = [];
  constructor(private readonly callback: (list: { getEntries(): object[] }) => void) {
    FakeObserver.all.push(this);
  }
  observe(options: { type: string }): void {
    this.types.push(options.type);
    this.options.push(options);
  }
  takeRecords(): object[] {
    const taken = this.pending;
    this.pending = [];
    return taken;
  }
  /** Calls the observer back with `entries`, as the browser does some time after they happen. */
  deliver(entries: object[]): void {
    this.callback({ getEntries: () => entries });
  }
}

export type FakeBrowser = ReturnType<typeof fakeBrowser>;

export function fakeBrowser(options: FakeOptions = {}) {
  let url = new URL(options.url ?? 'https://shop.example/products/1?color=red');
  const sent: Sent[] = [];
  const record = (via: Sent['via'], to: string | URL, data: string, init?: RequestInit) =>
    sent.push({ via, url: String(to), body: JSON.parse(data), init });
  const beacon = options.beacon ?? 'queue';
  const storage = options.storage ?? {};

  const win = new Listeners();
  const doc = Object.assign(new Listeners(), {
    title: options.title ?? 'Red shoes',
    referrer: options.referrer ?? 'https://search.example/?q=shoes',
    visibilityState: 'visible',
    prerendering: options.prerendering ?? false,
  });
  const location = {
    get href() { return url.href; },
    get hostname() { return url.hostname; },
    get pathname() { return url.pathname; },
    get search() { return url.search; },
    get hash() { return url.hash; },
  };
  const moveTo = (to: string | URL | null | undefined) => {
    if (to != null) url = new URL(to, url);
  };
  const history = {
    pushState(_state: unknown, _unused: string, to?: string | URL | null) { moveTo(to); },
    replaceState(_state: unknown, _unused: string, to?: string | URL | null) { moveTo(to); },
  };
  FakeObserver.supportedEntryTypes = options.observable ?? [];
  FakeObserver.all = [];

  const window = {
    addEventListener: win.addEventListener,
    document: doc,
    location,
    history,
    navigator: {
      language: 'en-GB',
      sendBeacon:
        beacon == 'missing'
          ? undefined
          : (to: string | URL, data: string) => {
              if (beacon == 'throw') throw new TypeError('Illegal invocation');
              if (beacon == 'refuse') return false;
              record('beacon', to, data);
              return true;
            },
    },
    screen: { width: 1440, height: 900 },
    localStorage: {
      getItem(key: string) {
        if (storage == 'throws') throw new DOMException('The operation is insecure.', 'SecurityError');
        return storage[key] ?? null;
      },
    },
    fetch: async (to: string | URL, init: RequestInit) => {
      record('fetch', to, init.body as string, init);
      return {};
    },
    performance: {
      getEntriesByType: (type: string) => options.timeline?.[type] ?? [],
      getEntriesByName: (name: string) =>
        Object.values(options.timeline ?? {})
          .flat()
          .filter((e) => (e as { name?: string }).name == name),
    },
    PerformanceObserver: options.observable ? FakeObserver : undefined,
    rivulet: undefined as RivuletApi | undefined,
  };

  const attrs: Record<string, string> = { 'site-id': '1', ...options.attrs };
  const tag = {
    src: options.src ?? 'https://rivulet.example/api/script.js',
    getAttribute: (name: string) => (name.startsWith('data-') ? attrs[name.slice(5)] ?? null : null),
  };

  return {
    window,
    document: doc,
    tag,
    sent,
    /** The events sent to /api/track, in order. */
    events: () => sent.filter((s) => s.url.endsWith('/track')).map((s) => s.body),
    /** Starts the script on this page, as the browser runs it. */
    start: () => start(window as unknown as Window, tag),
    /** An SPA navigation: history.pushState (as patched by the script, if it did). */
    push: (to: string) => window.history.pushState({}, '', to),
    replace: (to: string) => window.history.replaceState({}, '', to),
    /** The back button: the URL changes, then popstate. */
    back: (to: string) => {
      moveTo(to);
      win.fire('popstate');
    },
    /** A change of the hash: the URL changes, then popstate and hashchange, as browsers do. */
    hash: (hash: string) => {
      moveTo(hash);
      win.fire('popstate');
      win.fire('hashchange');
    },
    fireWindow: (type: string, event?: object) => win.fire(type, event),
    fireDocument: (type: string, event?: object) => doc.fire(type, event),
    hide: () => {
      doc.visibilityState = 'hidden';
      doc.fire('visibilitychange');
    },
    setStorage: (key: string, value: string) => {
      if (storage != 'throws') storage[key] = value;
    },
    listeners: { window: win, document: doc },
  };
}

/** A link element as the outbound tracker reads it; `closest` finds the link itself. */
export function link(href: string, text = 'Partner', target = '') {
  const u = new URL(href);
  const a = { href: u.href, protocol: u.protocol, hostname: u.hostname, target, innerText: text };
  return { closest: (selector: string) => (selector == 'a[href]' ? a : null) };
}
