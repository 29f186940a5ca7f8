// The dashboard's first paint on the benchmark's site (scripts/bench query): Chromium opens
// the Overview for Last 12 months, whose cards the server renders into the page, and the
// browser's own timings are read: first contentful paint and the load event, from the
// start of the navigation. Once cold (the caller dropped ClickHouse's caches just before),
// then FIRST_PAINT_RUNS warm. Every card must have rows, or the figure would be of an
// empty page. Environment: ADMIN_URL and ADMIN_TOKEN (the server bench_query.py started),
// SITE_ID, FIRST_PAINT_RUNS (5). Prints JSON.
import assert from "node:assert/strict";
import { launchChromium, logIn } from "../../tests/browser/harness.mjs";

const url = process.env.ADMIN_URL;
const token = process.env.ADMIN_TOKEN;
const site = process.env.SITE_ID || "1";
const runs = Number(process.env.FIRST_PAINT_RUNS || "5");
const CARDS = ["sources", "pages", "places", "devices", "events"];

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)];
}

async function visit(page) {
  await page.goto(`${url}/sites/${site}/overview?period=12mo`, { waitUntil: "load", timeout: 600_000 });
  for (const card of CARDS) {
    const rows = await page.locator(`#card-${card} table tbody tr`).count();
    assert.ok(rows > 0, `the ${card} card has no rows`);
  }
  return page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const fcp = performance.getEntriesByName("first-contentful-paint")[0];
    return { first_paint_ms: fcp ? fcp.startTime : null, load_ms: nav.loadEventEnd, response_end_ms: nav.responseEnd };
  });
}

const browser = await launchChromium();
try {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  await logIn(page, url, token);
  const cold = await visit(page);
  const warm = [];
  for (let i = 0; i < runs; i++) warm.push(await visit(page));
  const of = (k) => warm.map((w) => w[k]);
  console.log(
    JSON.stringify({
      period: "12mo",
      viewport: "1280x900",
      cold,
      warm_runs: runs,
      warm_first_paint_p50_ms: pct(of("first_paint_ms"), 50),
      warm_first_paint_max_ms: Math.max(...of("first_paint_ms")),
      warm_load_p50_ms: pct(of("load_ms"), 50),
    }),
  );
} finally {
  await browser.close();
}
