// The dashboard in a real browser (issue 6): Debian's chromium driven by playwright-core.
// Logs in, creates a site, generates an API key in Settings → API Key, sends an event
// with it to the running ingest, waits for it in the Overview, revokes the key and sees
// the next request rejected. Then every page at a phone's width (390×844): none is wider
// than the screen, and the copy buttons are on it. Screenshots of the pages are saved as
// artifacts (paths printed).
//
// Needs: the local stack (.stack/env), rivulet-admin built (target/debug, or
// RIVULET_BIN_DIR), and a running ingest + enricher (scripts/run-services start, which
// writes RIVULET_INGEST_URL to .stack/demo.env). scripts/test provides all of it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { artifacts, ingestUrl, launchChromium, logIn, startAdmin, waitReady } from "./harness.mjs";

function track(apiKey, siteId, extra) {
  return fetch(`${ingestUrl}/api/track`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      api_key: apiKey,
      site_id: siteId,
      type: "pageview",
      hostname: "browser-test.example.com",
      user_agent:
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
      ip_address: "81.2.69.142",
      ...extra,
    }),
  });
}

test("dashboard: login, site, Generate API Key, event in the Overview, revoke", { timeout: 180_000 }, async () => {
  assert.ok(ingestUrl, "RIVULET_INGEST_URL is not set: start the services with scripts/run-services start");
  await waitReady(ingestUrl, 30_000, "/_liveness");
  fs.mkdirSync(artifacts, { recursive: true });
  const token = randomBytes(24).toString("hex");
  const admin = await startAdmin(token);
  const browser = await launchChromium();
  try {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: admin.url });
    const page = await context.newPage();
    // The only dialog the dashboard opens is the "Revoke …?" confirmation; anything else
    // (an alert from injected script) fails the test.
    const unexpectedDialogs = [];
    page.on("dialog", async (d) => {
      if (d.type() === "confirm" && d.message().startsWith("Revoke ")) return d.accept();
      unexpectedDialogs.push(`${d.type()}: ${d.message()}`);
      return d.dismiss();
    });

    // Log in: a wrong token is refused with a clear message, the right one gets in.
    await page.goto(admin.url);
    assert.match(page.url(), /\/login$/);
    await page.fill("#token", "not-the-token");
    await page.click("button[type=submit]");
    await page.waitForSelector("p.error");
    assert.match(await page.textContent("p.error"), /admin token is wrong/);
    await page.fill("#token", token);
    await Promise.all([page.waitForURL(/\/sites$/), page.click("button[type=submit]")]);

    // Create a site.
    const domain = `browser-${randomBytes(4).toString("hex")}.example.com`;
    await page.fill("#domain", domain);
    await page.fill("#name", "Browser test");
    await Promise.all([page.waitForURL(/\/sites\/\d+\/settings$/), page.click("text=Create site")]);
    const siteId = Number(page.url().match(/\/sites\/(\d+)\/settings$/)[1]);
    assert.equal(await page.inputValue("#domain"), domain);

    // Settings → API Key → Generate API Key: the key is shown once, with a copy button.
    await Promise.all([page.waitForURL(/\/settings\/api-key$/), page.click("nav.tabs.sub >> text=API Key")]);
    await Promise.all([page.waitForURL(/\/settings\/api-key$/), page.click("text=Generate API Key")]);
    const apiKey = await page.inputValue("#new-api-key");
    assert.match(apiKey, /^rb_[0-9a-f]{32}$/);
    assert.match(await page.textContent(".new-key"), /environment variable.*never in client-side code/);
    await page.click("button[data-copy]");
    await page.waitForSelector("button[data-copy]:has-text('Copied')");
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), apiKey);
    const keyRow = page.locator(`tr:has(code:text("${apiKey.slice(0, 11)}…"))`);
    assert.match(await keyRow.textContent(), /Active/);
    const apiKeyShot = path.join(artifacts, "api-key-tab.png");
    await page.screenshot({ path: apiKeyShot, fullPage: true });
    await page.reload();
    assert.equal(await page.locator("#new-api-key").count(), 0, "the key is shown only once");

    // An event sent with the new key reaches the Overview (ingest → Kafka → enricher →
    // ClickHouse). A second one has a hostile pathname that must show as text.
    const pathname = `/from-the-browser-test/${randomBytes(4).toString("hex")}`;
    const xss = "<script>alert(1)</script>";
    for (const extra of [{ pathname }, { pathname: xss }, { type: "custom_event", event_name: "signup", pathname }]) {
      const r = await track(apiKey, siteId, extra);
      assert.equal(r.status, 200, `ingest answered ${r.status}: ${await r.text()}`);
    }
    await Promise.all([page.waitForURL(/\/overview$/), page.click("nav.tabs >> text=Overview")]);
    const end = Date.now() + 60_000;
    while (!((await page.textContent("body")).includes(pathname) && (await page.textContent("body")).includes(xss))) {
      assert.ok(Date.now() < end, "the event did not appear in the Overview within 60 s");
      await page.waitForTimeout(1000);
      await page.reload();
    }
    assert.equal(await page.textContent("#total-pageviews"), "2");
    assert.match(await page.textContent("#card-events"), /signup/);
    assert.ok((await page.locator(".chart-wide svg circle").count()) > 0, "the chart has its points");
    assert.match(await page.textContent("#card-pages"), /from-the-browser-test/);
    assert.deepEqual(unexpectedDialogs, [], "no script from event data ran");
    const overviewShot = path.join(artifacts, "overview.png");
    await page.screenshot({ path: overviewShot, fullPage: true });
    assert.match(await page.textContent("#card-sources"), /Direct/);
    // The other tabs, for the record.
    const tabShots = [];
    for (const [name, tabPath] of [
      ["privacy", "settings/privacy"],
      ["domains", "settings/domains"],
      ["tracking", "settings/tracking"],
      ["people", "users"],
    ]) {
      await page.goto(`${admin.url}/sites/${siteId}/${tabPath}`);
      const file = path.join(artifacts, `${name}-tab.png`);
      await page.screenshot({ path: file, fullPage: true });
      tabShots.push(file);
    }

    // Revoke: the next request with the key is rejected at once.
    await page.click("nav.tabs >> text=Settings");
    await Promise.all([page.waitForURL(/\/settings\/api-key$/), page.click("nav.tabs.sub >> text=API Key")]);
    await Promise.all([
      page.waitForURL(/\/settings\/api-key\?revoked=key_[0-9a-f]{16}$/),
      keyRow.locator("button:has-text('Revoke')").click(),
    ]);
    assert.match(await page.textContent(".notice"), /revoked/);
    assert.match(await keyRow.textContent(), /Revoked/);
    const after = await track(apiKey, siteId, { pathname: "/after-revoke" });
    assert.equal(after.status, 401, "a revoked key is rejected at once");
    assert.deepEqual(await after.json(), { success: false, error: "Invalid API key" });

    console.log(`screenshots: ${apiKeyShot} ${overviewShot} ${tabShots.join(" ")}`);
  } finally {
    await browser.close();
    admin.stop();
  }
});

/** Ingest's identify call, with a key. */
function identify(apiKey, siteId, body) {
  return fetch(`${ingestUrl}/api/identify`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ api_key: apiKey, site_id: siteId, ...body }),
  });
}

const PHONE = { width: 390, height: 844 };

test("dashboard at a phone's width (390×844): no page is wider than the screen", { timeout: 180_000 }, async () => {
  assert.ok(ingestUrl, "RIVULET_INGEST_URL is not set: start the services with scripts/run-services start");
  await waitReady(ingestUrl, 30_000, "/_liveness");
  fs.mkdirSync(artifacts, { recursive: true });
  const token = randomBytes(24).toString("hex");
  const admin = await startAdmin(token);
  const browser = await launchChromium();
  const shots = [];
  try {
    const context = await browser.newContext({ viewport: PHONE, isMobile: true, hasTouch: true });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: admin.url });
    const page = await context.newPage();
    const unexpectedDialogs = [];
    page.on("dialog", async (d) => {
      if (d.type() === "confirm" && d.message().startsWith("Erase ")) return d.accept();
      unexpectedDialogs.push(`${d.type()}: ${d.message()}`);
      return d.dismiss();
    });

    /** Nothing runs past the screen's edge (wide tables scroll inside their own box). */
    async function fitsTheScreen(name) {
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      const file = path.join(artifacts, `phone-${name}.png`);
      await page.screenshot({ path: file, fullPage: true });
      shots.push(file);
      assert.ok(width <= PHONE.width, `${name}: the page is ${width} px wide on a ${PHONE.width} px screen (${file})`);
    }
    /** The element is wholly on the screen, across. */
    async function onScreen(selector) {
      const box = await page.locator(selector).boundingBox();
      assert.ok(box, `${selector} is shown`);
      assert.ok(box.x >= 0 && box.x + box.width <= PHONE.width, `${selector} spans x ${box.x}..${box.x + box.width}`);
    }

    await logIn(page, admin.url, token);
    await fitsTheScreen("sites");
    // A site with a long domain, which has no spaces to wrap at.
    const hex = randomBytes(4).toString("hex");
    const domain = `phone-${hex}.a-rather-long-subdomain-of-the-shop.example.com`;
    await page.fill("#domain", domain);
    await page.fill("#name", "Phone test");
    await Promise.all([page.waitForURL(/\/sites\/\d+\/settings$/), page.click("text=Create site")]);
    const siteId = Number(page.url().match(/\/sites\/(\d+)\/settings$/)[1]);
    await fitsTheScreen("settings-general");

    // A new key: its Copy button is on the screen and copies.
    await page.goto(`${admin.url}/sites/${siteId}/settings/api-key`);
    await Promise.all([page.waitForURL(/\/settings\/api-key$/), page.click("text=Generate API Key")]);
    const apiKey = await page.inputValue("#new-api-key");
    await onScreen("#new-api-key");
    await onScreen("button[data-copy=new-api-key]");
    await page.click("button[data-copy=new-api-key]");
    await page.waitForSelector("button[data-copy]:has-text('Copied')");
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), apiKey);
    await fitsTheScreen("api-key");

    // Events with long paths, a custom event, a referrer, and a user who identifies.
    const user = `phone-user-${hex}`;
    const longPath = `/a/very/long/path/that/would/push/a/table/past/the/edge/of/a/phone/${hex}`;
    for (const extra of [
      // The visit's first event (a minute earlier): it brings the visit's channel.
      { pathname: longPath, user_id: user, referrer: "https://www.google.com/search?q=rivulet", timestamp: Date.now() - 60_000 },
      { pathname: "/pricing", user_id: user },
      { type: "custom_event", event_name: "signup", pathname: "/pricing", user_id: user },
    ]) {
      const r = await track(apiKey, siteId, extra);
      assert.equal(r.status, 200, `ingest answered ${r.status}: ${await r.text()}`);
    }
    const r = await identify(apiKey, siteId, { user_id: user, anonymous_id: `anon-${hex}`, traits: { plan: "pro", seats: 5 } });
    assert.equal(r.status, 200, `identify answered ${r.status}: ${await r.text()}`);
    await page.goto(`${admin.url}/sites/${siteId}/overview`);
    const end = Date.now() + 60_000;
    while (!(await page.textContent("body")).includes(longPath)) {
      assert.ok(Date.now() < end, "the events did not appear in the Overview within 60 s");
      await page.waitForTimeout(1000);
      await page.reload();
    }
    assert.match(await page.textContent("#card-sources"), /Organic Search/);
    await fitsTheScreen("overview");

    // Privacy: a request to erase a visitor shows as pending.
    await page.goto(`${admin.url}/sites/${siteId}/settings/privacy`);
    await page.check("input[name=kind][value=visitor_id]");
    await page.fill("#subject", `visitor-${hex}`);
    await Promise.all([page.waitForURL(/\/settings\/privacy\?requested=er_/), page.click("#erase button[type=submit]")]);
    assert.match(await page.textContent("#erasure-requests"), new RegExp(`visitor-${hex}`));
    assert.match(await page.textContent(".notice"), /recorded/);
    await fitsTheScreen("privacy");

    await page.goto(`${admin.url}/sites/${siteId}/settings/domains`);
    await fitsTheScreen("domains");

    // Tracking code: the snippet and its Copy button.
    await page.goto(`${admin.url}/sites/${siteId}/settings/tracking`);
    await onScreen("button[data-copy=tracking-snippet]");
    await page.click("button[data-copy=tracking-snippet]");
    await page.waitForSelector("button[data-copy=tracking-snippet]:has-text('Copied')");
    const snippet = await page.evaluate(() => navigator.clipboard.readText());
    assert.match(snippet, new RegExp(`^<script src="https?://[^"]+/api/script\\.js" data-site-id="${siteId}" defer></script>$`));
    await fitsTheScreen("tracking");

    // People: find the user; their traits arrive through the enricher.
    await page.goto(`${admin.url}/sites/${siteId}/users`);
    await fitsTheScreen("people");
    await page.fill("#user-search", user);
    await Promise.all([page.waitForURL(/\/users\?user_id=/), page.click("text=Find user")]);
    const traitsEnd = Date.now() + 60_000;
    while (!(await page.textContent("body")).includes("seats")) {
      assert.ok(Date.now() < traitsEnd, "the identify call's traits did not appear within 60 s");
      await page.waitForTimeout(1000);
      await page.reload();
    }
    assert.equal(await page.textContent("#profile-events"), "3");
    await fitsTheScreen("user");

    assert.deepEqual(unexpectedDialogs, [], "no unexpected dialog");
    console.log(`phone screenshots: ${shots.join(" ")}`);
  } finally {
    await browser.close();
    admin.stop();
  }
});
