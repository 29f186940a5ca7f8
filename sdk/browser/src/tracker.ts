import { firstMatch, parsePatterns } from './patterns.js';
import { pageKey, pageOf, type Where } from './page.js';
import { cut, fitJson } from './text.js';
import { watchVitals } from './vitals.js';

// One function, start(), holds the whole tracker: its parts share the configuration and
// state as closure variables, which the minifier shortens to one letter each. (Split into
// modules with parameters, the same code was 110 bytes larger gzipped: 5 % of the budget.)
// The pure parts (patterns, pages, text limits, web vitals) are modules of their own.

// Numbers and names are written where they are used, once each (esbuild keeps a named
// constant as a variable of its own, which costs bytes):
//  - 300 ms, how long an SPA navigation waits before its pageview;
//  - 10, the errors sent per page load at most;
//  - 'rivulet-ignore', the localStorage key of the opt-out flag.

/** window.rivulet. */
export interface RivuletApi {
  /** A pageview of the current URL, even if it was counted already. */
  pageview(): void;
  /** A custom_event named `name`; `properties` is sent as a string of JSON. */
  event(name: string, properties?: Record<string, unknown>): void;
  /** Tells ingest who the visitor is, and sends `user_id` with this page's later events. */
  identify(userId: string, traits?: Record<string, unknown>): void;
  /** Forgets the user id of identify: later events have no `user_id`. */
  clearUserId(): void;
}

/** What start reads of its <script> element (an HTMLScriptElement in a browser). */
export interface ScriptTag {
  src: string;
  getAttribute(name: string): string | null;
}

/** An event's own fields, beside the common ones. */
type EventFields = { type: string } & Record<string, unknown>;

declare global {
  interface Window {
    rivulet?: RivuletApi;
  }
}

/**
 * Starts tracking as the script tag asks, and installs window.rivulet. Returns the API,
 * or undefined (and does nothing) without a data-site-id or a place to send to; ingest
 * checks the id itself, so the script stays silent rather than carry messages.
 */
export function start(w: Window, tag: ScriptTag | null): RivuletApi | undefined {
  // --- configuration: every automatic kind is on unless its attribute is "false" -------
  const attr = (name: string) => tag!.getAttribute('data-' + name);
  const on = (name: string) => attr(name) != 'false';
  const siteId = tag && attr('site-id');
  const apiHost = tag && attr('api-host');
  // Same origin as the script by default: https://HOST/api/script.js → https://HOST/api/track.
  // data-api-host names the folder instead (absolute, or relative to the page for a
  // first-party proxy); a trailing slash is added so that its last segment is kept.
  const base = apiHost ? new URL(apiHost.replace(/\/*$/, '/'), w.location.href).href : tag?.src;
  if (!siteId || !base) return undefined;
  const skip = parsePatterns(attr('skip-patterns'));
  const mask = parsePatterns(attr('mask-patterns'));
  const trackQuery = on('track-query');

  // --- state: in memory only, gone with the page ----------------------------------------
  const doc = w.document;
  // The document's own URL: its performance event describes this load, even after SPA
  // navigations.
  const landing = new URL(w.location.href);
  let userId: string | undefined;
  let lastPage = pageKey(w.location);
  // A failing loop must not flood the site's data.
  let errorsLeft = 10;
  let navigationTimer: ReturnType<typeof setTimeout> | undefined;

  // --- delivery ---------------------------------------------------------------------------
  /**
   * Whether this browser opted out: read before every send, so that setting the flag
   * takes effect at once. localStorage can throw (storage blocked, sandboxed frames).
   */
  const optedOut = () => {
    try {
      return w.localStorage.getItem('rivulet-ignore') == 'true';
    } catch {
      return false;
    }
  };
  /**
   * POSTs `body` as JSON in a string body, which both sendBeacon and fetch send as
   * `Content-Type: text/plain;charset=UTF-8`: a CORS "simple" request, so no preflight.
   * sendBeacon first, because the browser delivers it even after the page is gone
   * (pagehide); fetch with keepalive when it is missing, throws, or refuses (queue full).
   */
  const send = (path: string, body: object) => {
    if (optedOut()) return;
    const url = new URL(path, base); // both take a URL as well as a string
    const data = JSON.stringify(body);
    try {
      if (w.navigator.sendBeacon?.(url, data)) return;
    } catch {
      // fall through to fetch
    }
    w.fetch?.(url, { method: 'POST', body: data, keepalive: true }).catch(() => {
      // analytics never surfaces a network error to the page
    });
  };
  /**
   * Sends an event with the fields every event carries, for the page at `where`; none
   * from a skipped path (data-skip-patterns), and a masked path replaced by its pattern.
   * Strings are cut to ingest's limits: one field over its limit would lose the event.
   */
  const track = (fields: EventFields, where: Where = w.location) => {
    const page = pageOf(where);
    if (firstMatch(page.path, skip)) return;
    send('track', {
      site_id: siteId,
      hostname: where.hostname,
      pathname: cut(firstMatch(page.path, mask) || page.path, 2048),
      querystring: trackQuery ? cut(page.query, 2048) : undefined,
      page_title: cut(doc.title, 512),
      referrer: cut(doc.referrer, 2048),
      language: w.navigator.language,
      screenWidth: w.screen.width,
      screenHeight: w.screen.height,
      user_id: userId,
      // The browser's clock as it sends: ingest measures its skew (no timestamp is sent,
      // so the event's time is the receive time).
      sent_at: Date.now(),
      ...fields,
    });
  };

  // --- pageviews, and SPA navigations -----------------------------------------------------
  const pageview = () => {
    lastPage = pageKey(w.location);
    track({ type: 'pageview' });
  };
  /**
   * After an SPA navigation settles (300 ms), a pageview if the page is another one:
   * routers set the new title after the URL, and a burst of changes (a redirect) counts
   * once, for the URL it ends on.
   */
  const onNavigation = () => {
    clearTimeout(navigationTimer);
    navigationTimer = setTimeout(() => {
      if (pageKey(w.location) != lastPage) pageview();
    }, 300);
  };
  if (on('track-spa')) {
    const history = w.history;
    for (const method of ['pushState', 'replaceState'] as const) {
      const original = history[method];
      history[method] = function (this: History, ...args: Parameters<History['pushState']>) {
        original.apply(this, args);
        onNavigation();
      };
    }
    w.addEventListener('popstate', onNavigation);
    w.addEventListener('hashchange', onNavigation);
  }

  // --- outbound links ---------------------------------------------------------------------
  // An http(s) link to another host; mailto:, tel: and same-host links are not outbound,
  // and SVG links (no `protocol`) are skipped. The capture phase sees clicks whose
  // propagation the page stops. The text is cut to 200 characters, enough to recognise
  // the link and to keep the properties within ingest's 2048.
  if (on('track-outbound'))
    doc.addEventListener(
      'click',
      (e) => {
        const target = e.target as Element | null;
        const link = target?.closest?.('a[href]') as HTMLAnchorElement | null | undefined;
        if (link && /^https?:$/.test(link.protocol) && link.hostname != w.location.hostname)
          track({
            type: 'outbound',
            properties: JSON.stringify({
              url: link.href,
              text: cut(link.innerText.trim(), 200),
              target: link.target || '_self',
            }),
          });
      },
      true,
    );

  // --- uncaught errors and unhandled rejections -------------------------------------------
  if (on('track-errors')) {
    /**
     * An error event for `error`, what was thrown or a rejection's reason (any value:
     * Object() reads them alike). event_name is its type ("TypeError"), or "Error" for a
     * value that has none. Ingest requires a message, so there always is one. The stack is
     * shortened first, then the message, to fit ingest's 4096 characters.
     */
    const onError = (error: unknown, place?: ErrorEvent) => {
      const e = Object(error);
      const name = '' + (e.name || 'Error');
      if (errorsLeft-- > 0)
        track({
          type: 'error',
          event_name: cut(name, 256),
          properties: fitJson(
            {
              message: '' + (e.message || place?.message || error || name),
              stack: e.stack,
              fileName: place?.filename,
              lineNumber: place?.lineno,
              columnNumber: place?.colno,
            },
            4096,
            ['stack', 'message', 'fileName'],
          ),
        });
    };
    w.addEventListener('error', (e) => onError(e.error, e));
    w.addEventListener('unhandledrejection', (e) => onError(e.reason));
  }

  // --- web vitals: once, when the page is first hidden ------------------------------------
  // The last moment the page surely runs: a visitor who leaves or switches tabs may never
  // come back. visibilitychange comes first; pagehide covers browsers that skip it.
  if (on('web-vitals')) {
    const readVitals = watchVitals(w);
    let sent = false;
    const onHidden = () => {
      if (!sent) {
        sent = true;
        track({ type: 'performance', ...readVitals() }, landing);
      }
    };
    doc.addEventListener('visibilitychange', () => doc.visibilityState == 'hidden' && onHidden());
    w.addEventListener('pagehide', onHidden);
  }

  // --- window.rivulet ---------------------------------------------------------------------
  // No queue for calls made before the script loaded (README: The window.rivulet API).
  const api: RivuletApi = {
    pageview,
    event(name, properties) {
      if (name)
        track({
          type: 'custom_event',
          event_name: cut(name, 256),
          properties: properties && JSON.stringify(properties),
        });
    },
    identify(id, traits) {
      // Ingest checks the id (at most 255 characters): an empty one is all the script
      // skips. A number (a database id) is sent as the string ingest wants.
      if (!id) return;
      userId = '' + id;
      send('identify', { site_id: siteId, user_id: userId, traits });
    },
    clearUserId() {
      userId = undefined;
    },
  };
  w.rivulet = api;

  // --- the first pageview -----------------------------------------------------------------
  // A prerendered page counts when the visitor opens it, if ever (prerenderingchange fires
  // once, on activation).
  if (on('auto-track-pageview')) {
    if ((doc as { prerendering?: boolean }).prerendering)
      doc.addEventListener('prerenderingchange', pageview);
    else pageview();
  }
  return api;
}
