// Web vitals with the browser's own PerformanceObserver and Navigation Timing: a minimal
// reading of the definitions at web.dev (no code taken from the web-vitals library).
// Times are milliseconds from the start of navigation, as the browser gives them
// (fractions included, as Rybbit sends them); CLS is unitless. Not handled, to stay small:
// a prerendered page's times count from the prerender's start, not from its activation,
// and a page loaded in a background tab reports FCP and LCP as of when it was first shown.

/** The fields of a performance event; null when the browser did not measure it. */
export interface Vitals {
  lcp: number | null;
  cls: number | null;
  inp: number | null;
  fcp: number | null;
  ttfb: number | null;
}

/** What watchVitals needs of the browser (a Window in a browser). */
export interface Measurer {
  performance: {
    getEntriesByType(type: string): PerformanceEntryList;
    getEntriesByName(name: string): PerformanceEntryList;
  };
  PerformanceObserver?: {
    new (callback: PerformanceObserverCallback): PerformanceObserver;
    readonly supportedEntryTypes?: readonly string[];
  };
}

/** The fields of the entry types read here that PerformanceEntry does not declare. */
interface Entry extends PerformanceEntry {
  value: number;
  hadRecentInput?: boolean;
  interactionId?: number;
  responseStart: number;
}

/** CLS counts the worst burst of shifts: gaps under 1 s, at most 5 s long. */
const SHIFT_GAP_MS = 1000;
const SHIFT_BURST_MS = 5000;
/**
 * The smallest durationThreshold the Event Timing API allows: few interactions are
 * faster (the next paint alone takes a frame), so the first-input entry that web.dev's
 * INP (threshold 40 ms) adds for the faster ones is not needed.
 */
const EVENT_THRESHOLD_MS = 16;

/**
 * Starts watching the page's web vitals, and returns the function that reads them once the
 * page is hidden (it first takes the entries the observer has not delivered yet).
 */
export function watchVitals(browser: Measurer): () => Vitals {
  const vitals: Vitals = { lcp: null, cls: null, inp: null, fcp: null, ttfb: null };
  let burst = 0;
  let burstStart = 0;
  let lastShift = 0;

  const onEntry = (e: Entry) => {
    const t = e.startTime;
    if (e.entryType == 'largest-contentful-paint') {
      // The browser stops reporting candidates after the first input: the last one is LCP.
      vitals.lcp = t;
    } else if (e.entryType == 'event') {
      // INP: the slowest interaction (web.dev also ignores one in 50 on pages with more
      // than 50 interactions; this does not).
      if (e.interactionId) vitals.inp = Math.max(vitals.inp || 0, e.duration);
    } else if (!e.hadRecentInput) {
      // A layout shift not caused by an input just before.
      if (burst && t - lastShift < SHIFT_GAP_MS && t - burstStart < SHIFT_BURST_MS) {
        burst += e.value;
      } else {
        burst = e.value;
        burstStart = t;
      }
      lastShift = t;
      vitals.cls = Math.max(vitals.cls!, burst);
    }
  };

  // One observer for the three types, buffered: entries from before the script ran count.
  // (durationThreshold applies to event entries; the other types ignore it.)
  const Observer = browser.PerformanceObserver;
  const supported = Observer?.supportedEntryTypes || [];
  const observer =
    Observer && new Observer((list) => list.getEntries().forEach(onEntry as (e: PerformanceEntry) => void));
  for (const type of ['largest-contentful-paint', 'layout-shift', 'event'])
    if (supported.includes(type))
      observer!.observe({
        type,
        buffered: true,
        durationThreshold: EVENT_THRESHOLD_MS,
      } as PerformanceObserverInit);
  // Observed and no shift yet: CLS is 0, not unknown.
  if (supported.includes('layout-shift')) vitals.cls = 0;

  return () => {
    observer?.takeRecords().forEach(onEntry as (e: PerformanceEntry) => void);
    // Paint and navigation entries stay in the performance timeline: no observer needed.
    const [fcp] = browser.performance.getEntriesByName('first-contentful-paint');
    const [nav] = browser.performance.getEntriesByType('navigation') as Entry[];
    if (fcp) vitals.fcp = fcp.startTime;
    if (nav) vitals.ttfb = nav.responseStart;
    return vitals;
  };
}
