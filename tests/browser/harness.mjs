// What the dashboard's browser tests share: the stack's environment, `rivulet-admin serve`
// on a free port, Debian's chromium through playwright-core, and logging in.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const stackDir = process.env.RIVULET_STACK_DIR || path.join(root, ".stack");
export const artifacts = process.env.RIVULET_ARTIFACTS_DIR || path.join(stackDir, "artifacts", "dashboard");
export const chromiumPath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";

export function readEnvFile(file) {
  if (!fs.existsSync(file)) return {};
  const env = {};
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    const m = line.match(/^\s*([A-Z0-9_]+)=(.*)$/);
    if (m) env[m[1]] = m[2].trim();
  }
  return env;
}

export const stackEnvFile = path.join(stackDir, "env");
assert.ok(fs.existsSync(stackEnvFile), `${stackEnvFile} is missing: run scripts/stack up`);
export const stackEnv = readEnvFile(stackEnvFile);
export const ingestUrl =
  process.env.RIVULET_INGEST_URL || readEnvFile(path.join(stackDir, "demo.env")).RIVULET_INGEST_URL;

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Ingest answers /_readiness only on its internal address (INGEST_INTERNAL_ADDR), so on
// its public one the test waits for /_liveness.
export async function waitReady(url, ms, probe = "/_readiness") {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if ((await fetch(`${url}${probe}`)).ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > end) throw new Error(`${url} did not become ready within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 150));
  }
}

/** Starts `rivulet-admin serve` on a free port; its stdin is its lifeline. */
export async function startAdmin(token) {
  const bin = path.join(process.env.RIVULET_BIN_DIR || path.join(root, "target/debug"), "rivulet-admin");
  assert.ok(fs.existsSync(bin), `${bin} is missing: run cargo build --workspace --bins`);
  const port = await freePort();
  fs.mkdirSync(path.join(stackDir, "logs/tests"), { recursive: true });
  const log = path.join(stackDir, "logs/tests", `admin-browser-${port}.log`);
  const out = fs.openSync(log, "w");
  const child = spawn(bin, ["serve"], {
    env: {
      ...process.env,
      ...stackEnv,
      ADMIN_ADDR: `127.0.0.1:${port}`,
      ADMIN_TOKEN: token,
      RIVULET_STDIN_LIFELINE: "1",
      LOG_FORMAT: "text",
    },
    stdio: ["pipe", out, out],
  });
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url, 30_000);
  return { url, log, stop: () => child.stdin.end() };
}

export function launchChromium() {
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-default-apps",
      "--disable-sync",
      "--no-first-run",
      "--no-default-browser-check",
      "--metrics-recording-only",
    ],
  });
}

export async function logIn(page, url, token) {
  await page.goto(url);
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(/\/sites$/), page.click("button[type=submit]")]);
}

