// End-to-end test of the demo chat page (/demo) and ChatArchiver in real headless Chromium.
//
// Needs a running mnemo: MNEMO_URL (e.g. http://127.0.0.1:PORT), MNEMO_TOKEN (a read+write token
// for a user of its own), and CHROMIUM (default /usr/bin/chromium). scripts/test.d/browser sets
// them up. Prints `browser: N passed, M failed` last and exits non-zero on failure.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { chromium } from "playwright-core";

const BASE = process.env.MNEMO_URL;
const TOKEN = process.env.MNEMO_TOKEN;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
if (!BASE || !TOKEN) {
  console.error("browser: set MNEMO_URL and MNEMO_TOKEN (scripts/test.d/browser does)");
  process.exit(2);
}

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

async function api(path) {
  const response = await fetch(BASE + path, { headers: { authorization: `Bearer ${TOKEN}` } });
  return { status: response.status, body: await response.json().catch(() => null) };
}

/** Every stored message of a session (all pages), or null when the session does not exist. */
async function stored(session) {
  const items = [];
  let path = `/api/chat/sessions/${encodeURIComponent(session)}/messages?limit=500`;
  for (;;) {
    const { status, body } = await api(path);
    if (status === 404) return null;
    assert(status === 200, `messages answered ${status}: ${JSON.stringify(body)}`);
    items.push(...body.items);
    if (!body.next_cursor) return items;
    path = `/api/chat/sessions/${encodeURIComponent(session)}/messages?limit=500&cursor=${body.next_cursor}`;
  }
}

/** Polls until `count` messages are stored (beacons are asynchronous), then returns them. */
async function waitForStored(session, count, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let items = null;
  while (Date.now() < deadline) {
    items = await stored(session);
    if (items && items.length >= count) return items;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`expected ${count} stored messages in ${session}, found ${items ? items.length : "no session"}`);
}

function assertExactlyOnce(items, texts) {
  const got = items.map((m) => m.text);
  assert(got.length === texts.length, `stored ${got.length} messages, expected ${texts.length}: ${JSON.stringify(got)}`);
  assert(JSON.stringify(got) === JSON.stringify(texts), `stored texts ${JSON.stringify(got)} != ${JSON.stringify(texts)}`);
  assert(new Set(items.map((m) => m.id)).size === items.length, "message ids are unique");
}

async function openDemo(context, session, options) {
  const page = await context.newPage();
  const hash = new URLSearchParams({ token: TOKEN, session, ...options }).toString();
  await page.goto(`${BASE}/demo#${hash}`);
  await page.waitForFunction(() => window.archiver !== undefined);
  return page;
}

async function say(page, text, count) {
  await page.fill("#message", text);
  await page.click("#send");
  await page.waitForFunction((n) => document.getElementById("log").dataset.count === String(n), count);
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test("messages buffered in the page reach the database once, by beacon, when the page closes", async (context) => {
  const session = `beacon-${randomUUID()}`;
  const page = await openDemo(context, session, { every: "1000", seconds: "3600", context: "off" });
  const texts = ["hello", "how are you?", "fine, thanks", "what's new?", "nothing much"];
  for (const [i, text] of texts.entries()) await say(page, text, i + 1);
  assert((await stored(session)) === null, "nothing is archived before the page closes");
  await page.close({ runBeforeUnload: true });
  assertExactlyOnce(await waitForStored(session, texts.length), texts);
});

test("periodic archives, compiled context, then the unload beacon: still exactly once", async (context) => {
  const session = `periodic-${randomUUID()}`;
  const page = await openDemo(context, session, { every: "2", seconds: "3600" });
  const texts = ["one", "two", "three", "four", "five"];
  for (const [i, text] of texts.entries()) await say(page, text, i + 1);
  // Two fetch archives of two messages each; without a model the page shows the compiled context.
  await page.waitForFunction(() => Number(document.getElementById("status").dataset.archived || 0) >= 4);
  await page.waitForFunction(() => document.getElementById("context").textContent.includes('"five"'));
  const compiled = JSON.parse(await page.textContent("#context"));
  assert(compiled[0].role === "system" && compiled[1].content.startsWith("## Long-term notes"), "context sections");
  assert(compiled.at(-1).content === "five", "the new message closes the context");
  await page.close({ runBeforeUnload: true });
  const items = await waitForStored(session, texts.length);
  assertExactlyOnce(items, texts);
  // The beacon re-sent what fetch had not confirmed; nothing more arrives later.
  const again = await stored(session);
  assert(again.length === texts.length, "no late duplicates");
});

test("a new session's page shows what was recalled from an earlier one", async (context) => {
  const marker = `zq${randomUUID().slice(0, 8)}`;
  const first = await openDemo(context, `recall-a-${randomUUID()}`, { every: "1000", seconds: "3600" });
  await say(first, `my cat is called ${marker}`, 1);
  await first.waitForFunction(() => document.getElementById("context").textContent.includes("cat is called"));
  await first.close({ runBeforeUnload: true });
  const second = await openDemo(context, `recall-b-${randomUUID()}`, { every: "1000", seconds: "3600" });
  await say(second, `what do you know about ${marker}?`, 1);
  await second.waitForFunction(() => Number(document.getElementById("recalled").dataset.count || 0) > 0);
  const recalled = await second.textContent("#recalled");
  assert(recalled.includes(`my cat is called ${marker}`), `recalled: ${recalled}`);
  assert(recalled.includes("message (session recall-a-"), `recalled names its session: ${recalled}`);
  await second.close({ runBeforeUnload: true });
});

test("an unload flush is split into several beacons, each under the chunk size", async (context) => {
  // Chromium allows at most 64 KiB of keepalive (beacon) data in flight per page in total, so the
  // chunk size is lowered here to prove the splitting with several beacons inside that budget.
  const session = `chunks-${randomUUID()}`;
  const page = await openDemo(context, session, { every: "1000", seconds: "3600", context: "off", beacon: "16000" });
  const sizes = await page.evaluate(() => {
    for (let i = 0; i < 8; i += 1) {
      // Distinct times: beacons may arrive in any order, and messages sort by time.
      const timestamp = new Date(Date.now() + i);
      window.archiver.add({ text: `${i}:` + "x".repeat(6000), sender: i % 2 ? "ai" : "user", timestamp });
    }
    return window.archiver.beaconChunks().map((body) => new Blob([body]).size);
  });
  assert(sizes.length >= 3, `expected at least 3 beacons, got ${sizes.length}`);
  assert(sizes.every((size) => size < 16000), `beacon sizes ${sizes}`);
  await page.close({ runBeforeUnload: true });
  const items = await waitForStored(session, 8);
  assert(items.length === 8, `stored ${items.length}`);
  assert(items.every((m, i) => m.text.startsWith(`${i}:`) && m.text.length === 6002), "texts intact and in order");
});

test("the default chunks stay under 60 KB", async (context) => {
  const session = `sizes-${randomUUID()}`;
  const page = await openDemo(context, session, { every: "1000", seconds: "3600", context: "off" });
  const sizes = await page.evaluate(() => {
    for (let i = 0; i < 8; i += 1) window.archiver.add({ text: "y".repeat(20000), sender: "user" });
    return window.archiver.beaconChunks().map((body) => new Blob([body]).size);
  });
  assert(sizes.length >= 3 && sizes.every((size) => size < 60000), `beacon sizes ${sizes}`);
  await page.close();
});

test("an archiver without a session id adopts the one the server makes, and sends edits as updates", async (context) => {
  const page = await openDemo(context, `unused-${randomUUID()}`, { every: "1000", seconds: "3600", context: "off" });
  const result = await page.evaluate(async (token) => {
    const { ChatArchiver } = await import("/demo/chat-archiver.js");
    const told = [];
    const archiver = new ChatArchiver({ token, everyMessages: 0, everySeconds: 0, onSession: (id) => told.push(id) });
    const before = archiver.sessionId;
    archiver.add({ id: "q", text: "name a colour", sender: "user" });
    const reply = archiver.add({ id: "r", text: "Ultra", sender: "ai" });
    const first = await archiver.flush();
    const made = archiver.sessionId;
    archiver.add({ id: "q2", text: "another?", sender: "user" });
    const second = await archiver.flush();
    // The rest of the streamed reply arrives, and the user takes the second question back.
    archiver.update(reply.id, { text: "Ultramarine, a deep blue." });
    archiver.remove("q2");
    const third = await archiver.flush();
    const fourth = await archiver.flush();
    return { before, made, told, first, second, third, fourth };
  }, TOKEN);
  const { before, made, told, first, second, third, fourth } = result;
  const all = JSON.stringify(result);
  assert(before === null, `no session before the first archive: ${before}`);
  assert(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(made), `a UUIDv7: ${made}`);
  assert(first.session_id === made && first.new === 2 && told.length === 1 && told[0] === made, `adopted and told: ${all}`);
  assert(second.session_id === made && second.new === 1 && second.duplicates === 0, `the next archive uses it: ${all}`);
  assert(third.session_id === made && third.updated === 1 && third.deleted === 1 && third.new === 0, `edits: ${all}`);
  assert(fourth.new === 0 && fourth.updated === 0 && fourth.deleted === 0, `nothing left: ${all}`);
  const items = await stored(made);
  assertExactlyOnce(items, ["name a colour", "Ultramarine, a deep blue."]);
  await page.close();
});

const userDataDir = mkdtempSync(join(tmpdir(), "mnemo-chromium-"));
let passed = 0;
let failed = 0;
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
  });
  for (const { name, fn } of tests) {
    try {
      await fn(context);
      passed += 1;
      console.log(`ok - ${name}`);
    } catch (err) {
      failed += 1;
      console.log(`FAILED - ${name}\n  ${err && err.stack ? err.stack : err}`);
    }
  }
} catch (err) {
  failed += 1;
  console.log(`FAILED - browser start: ${err && err.stack ? err.stack : err}`);
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
}
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
