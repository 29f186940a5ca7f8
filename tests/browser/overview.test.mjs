// The Overview in a real browser, at a desktop's width (1280) and a phone's (390): a site
// with seeded events; change the range, turn the comparison on, click a country row then a
// browser row, check the chips and that the narrowed figures are the Stats API's answer to
// the same query, remove a filter, open a breakdown's details and page through it, export
// a CSV and compare its rows with the API's. A screenshot of each step is kept
// (RIVULET_ARTIFACTS_DIR, printed at the end).
//
// Needs the local stack (.stack/env) and rivulet-admin built; the events are written into
// ClickHouse directly (the enricher's columns), so that the figures are known.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { artifacts, launchChromium, logIn, stackEnv, startAdmin } from "./harness.mjs";

const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

/** A statement on the stack's ClickHouse, as Rivulet's user; the body is its data. */
async function clickhouse(sql, body = "") {
  const url = new URL(stackEnv.CLICKHOUSE_URL);
  url.searchParams.set("query", sql);
  url.searchParams.set("database", stackEnv.CLICKHOUSE_DB || "rivulet");
  const auth = Buffer.from(`${stackEnv.CLICKHOUSE_USER}:${stackEnv.CLICKHOUSE_PASSWORD}`).toString("base64");
  const r = await fetch(url, { method: "POST", body, headers: { authorization: `Basic ${auth}` } });
  const text = await r.text();
  assert.ok(r.ok, `ClickHouse: ${r.status} ${text}`);
  return text;
}

const COUNTRIES = ["DE", "FR", "GB", "US", "JP"];
const BROWSERS = ["Chrome", "Firefox", "Safari"];

/** Visits of the last 40 days (UTC): each 1–3 pageviews, one of 150 pages among them. */
function seedRows(siteId) {
  const rows = [];
  const now = Math.floor(Date.now() / 1000);
  let n = 0;
  for (let visit = 0; visit < 420; visit++) {
    const start = now - ((visit * 7919) % (40 * 86400)) - 60;
    const visitor = randomBytes(16).toString("hex");
    const session = randomBytes(16).toString("hex");
    const country = COUNTRIES[visit % COUNTRIES.length];
    const browser = BROWSERS[Math.floor(visit / 5) % BROWSERS.length];
    for (let i = 0; i <= visit % 3; i++) {
      const ts = start + i * 40;
      const when = new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19);
      rows.push({
        event_id: randomUUID(), site_id: siteId, timestamp: when, received_at: when, type: "pageview",
        hostname: "walk.example", pathname: `/p/${(n++ * 7919) % 997}`, channel: i === 0 && visit % 4 === 0 ? "Organic Search" : "Direct",
        referrer: i === 0 && visit % 4 === 0 ? "https://www.google.com/" : "", user_id: visitor, session_id: session,
        country, browser, browser_version: "124", operating_system: "Linux", device_type: "Desktop", screen_width: 1440,
      });
    }
  }
  return rows;
}

test("overview: range, comparison, filters by click, details, CSV — the Stats API's figures", { timeout: 240_000 }, async () => {
  fs.mkdirSync(artifacts, { recursive: true });
  const token = randomBytes(24).toString("hex");
  const admin = await startAdmin(token);
  const api = (p, init = {}) =>
    fetch(`${admin.url}${p}`, { ...init, headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...(init.headers || {}) } });
  const site = await (await api("/api/sites", { method: "POST", body: JSON.stringify({ domain: `walk-${randomBytes(4).toString("hex")}.example.com` }) })).json();
  const siteId = site.site_id;
  const statsKey = (await (await api(`/api/sites/${siteId}/keys`, { method: "POST", body: JSON.stringify({ scopes: ["stats:read"] }) })).json()).api_key;
  const rows = seedRows(siteId);
  await clickhouse(
    "INSERT INTO events (event_id, site_id, timestamp, received_at, type, hostname, pathname, channel, referrer, user_id, session_id, country, browser, browser_version, operating_system, device_type, screen_width) FORMAT JSONEachRow",
    rows.map((r) => JSON.stringify(r)).join("\n"),
  );
  /** The Stats API's answer. */
  const query = async (body) => {
    const r = await fetch(`${admin.url}/api/v2/query`, {
      method: "POST", headers: { authorization: `Bearer ${statsKey}` }, body: JSON.stringify({ site_id: siteId, ...body }),
    });
    const text = await r.text();
    assert.equal(r.status, 200, text);
    return JSON.parse(text);
  };
  const today = new Date().toISOString().slice(0, 10);
  const daysAgo = (d) => new Date(Date.now() - d * 86400_000).toISOString().slice(0, 10);
  const shots = [];
  const browser = await launchChromium();
  try {
    for (const [name, viewport] of [["desktop", DESKTOP], ["phone", PHONE]]) {
      const context = await browser.newContext({ viewport, isMobile: viewport === PHONE });
      const page = await context.newPage();
      const shot = async (step) => {
        const file = path.join(artifacts, `overview-${name}-${step}.png`);
        await page.screenshot({ path: file, fullPage: true });
        shots.push(file);
        const width = await page.evaluate(() => document.documentElement.scrollWidth);
        assert.ok(width <= viewport.width, `${name} ${step}: the page is ${width} px wide on a ${viewport.width} px screen`);
      };
      await logIn(page, admin.url, token);
      await page.goto(`${admin.url}/sites/${siteId}/overview`);
      await page.waitForSelector("#top-figures");
      await shot("1-last-30-days");

      // The range: last 7 days (ends today).
      await Promise.all([page.waitForURL(/period=7d/), page.click("nav.periods >> text=Last 7 days")]);
      await shot("2-last-7-days");
      const range = [daysAgo(6), today];
      const figures = async () => Object.fromEntries(
        await Promise.all(["visitors", "visits", "pageviews"].map(async (m) => [m, (await page.textContent(`#total-${m}`)).replaceAll(",", "")])),
      );
      const apiFigures = async (filters) => {
        const r = await query({ metrics: ["visitors", "visits", "pageviews"], date_range: range, filters });
        const [visitors, visits, pageviews] = r.results[0].metrics.map(String);
        return { visitors, visits, pageviews };
      };
      assert.deepEqual(await figures(), await apiFigures([]), "the top figures are the API's");

      // The comparison with the previous period.
      await Promise.all([page.waitForURL(/compare=previous_period/), page.click("nav.compare >> text=Previous period")]);
      assert.ok((await page.locator("#top-figures .compared").count()) > 0, "each figure shows its change");
      assert.equal(await page.locator(".chart-wide svg .line.compared").count(), 1, "the chart has the compared series");
      await shot("3-compared");

      // Filter by a click on a country, then on a browser: two chips, the API's figures.
      await Promise.all([page.waitForURL(/f=is%7Cvisit%3Acountry%7CDE/), page.click("#card-places a.filter-link >> text=DE")]);
      await Promise.all([page.waitForURL(/visit%3Abrowser%7CChrome/), page.click("#card-devices a.filter-link >> text=Chrome")]);
      assert.equal(await page.locator("#filter-chips li.chip").count(), 2);
      assert.match(await page.textContent("#filter-chips"), /Country\s+is\s+DE/);
      assert.match(await page.textContent("#filter-chips"), /Browser\s+is\s+Chrome/);
      const both = [["is", "visit:country", ["DE"]], ["is", "visit:browser", ["Chrome"]]];
      assert.deepEqual(await figures(), await apiFigures(both), "the narrowed figures are the API's");
      await shot("4-filtered");

      // Remove the country filter.
      await Promise.all([page.waitForURL((u) => !u.toString().includes("visit%3Acountry")), page.click("#filter-chips li.chip[data-dimension='visit:country'] a.remove")]);
      assert.equal(await page.locator("#filter-chips li.chip").count(), 1);
      assert.deepEqual(await figures(), await apiFigures([["is", "visit:browser", ["Chrome"]]]));
      await shot("5-one-filter");

      // All time, so that the pages are many: Details of the Pages card, page 2.
      await Promise.all([page.waitForURL(/period=all/), page.click("nav.periods >> text=All time")]);
      await Promise.all([page.waitForURL(/\/overview\/details/), page.click("#card-pages >> text=Details")]);
      const all = await query({
        metrics: ["visitors", "pageviews"], date_range: "all", dimensions: ["event:page"],
        filters: [["is", "visit:browser", ["Chrome"]], ["is", "event:type", ["pageview"]]], include: { total_rows: true },
      });
      const pages = Math.ceil(all.meta.total_rows / 100);
      assert.ok(pages >= 2, `the breakdown has ${all.meta.total_rows} rows: more than a page`);
      assert.match(await page.textContent("#page-of"), new RegExp(`Page 1 of ${pages}\\b`));
      await shot("6-details");
      await Promise.all([page.waitForURL(/page=2/), page.click("#next-page")]);
      const pageTwo = await page.locator("table.breakdown-rows tbody tr").count();
      assert.equal(pageTwo, Math.min(100, all.meta.total_rows - 100), "page 2 holds the rows past the first 100");
      const firstOnTwo = await page.textContent("table.breakdown-rows tbody tr:first-child a.filter-link");
      assert.equal(firstOnTwo, all.results[100].dimensions[0], "page 2 starts where the API's 101st row is");
      await shot("7-details-page-2");

      // Export the breakdown: its rows are the API's.
      const href = await page.getAttribute("a:has-text('Export CSV')", "href");
      const csv = await (await page.request.get(`${admin.url}${href}`)).text();
      const lines = csv.trim().split("\n");
      assert.equal(lines[0], "page,visitors,pageviews,percentage");
      const fromCsv = lines.slice(1).map((l) => l.split(",").slice(0, 3).join(",")).sort();
      const fromApi = all.results.map((r) => [r.dimensions[0], r.metrics[0], r.metrics[1]].join(",")).sort();
      assert.deepEqual(fromCsv, fromApi, "the CSV's rows are the API's");
      await context.close();
    }
  } finally {
    await browser.close();
    admin.stop();
    console.log(`overview screenshots: ${shots.join(" ")}`);
  }
});
