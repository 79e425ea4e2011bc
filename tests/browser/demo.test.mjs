// End-to-end test of the demo chat page (/demo), ChatArchiver (its retry path included) and
// cross-origin use of the API (CORS, sendBeacon) in real headless Chromium.
//
// Needs a running mnemo: MNEMO_URL (e.g. http://127.0.0.1:PORT), MNEMO_TOKEN (a read+write token
// for a user of its own), MNEMO_JWT_SECRET (its HS256 secret, to make tokens for more users and
// an expired one), MNEMO_PAGE_PORT (a free port for the page of another origin, which mnemo must
// allow: MNEMO_CORS_ORIGINS=http://127.0.0.1:PORT), per-user rate limits switched on
// (MNEMO_RATE_LIMIT_USER_PER_SEC, so the rate-limit headers and a 429 can be read), and CHROMIUM
// (default /usr/bin/chromium). scripts/test.d/browser sets them up. Prints
// `browser: N passed, M failed` last and exits non-zero on failure.

import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createHmac, randomUUID } from "node:crypto";
import { chromium } from "playwright-core";

const BASE = process.env.MNEMO_URL;
const TOKEN = process.env.MNEMO_TOKEN;
const SECRET = process.env.MNEMO_JWT_SECRET;
const PAGE_PORT = Number(process.env.MNEMO_PAGE_PORT || 0);
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
if (!BASE || !TOKEN || !SECRET || !PAGE_PORT) {
  console.error("browser: set MNEMO_URL, MNEMO_TOKEN, MNEMO_JWT_SECRET and MNEMO_PAGE_PORT (scripts/test.d/browser does)");
  process.exit(2);
}
/** The origin of the other page, allowed by mnemo's CORS settings. */
const PAGE_ORIGIN = `http://127.0.0.1:${PAGE_PORT}`;
/** The same page under an origin mnemo does not allow. */
const STRANGER_ORIGIN = `http://localhost:${PAGE_PORT}`;

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

/** An HS256 token for `user` (of tenant `browser`), valid for `ttl` seconds (negative: expired). */
function tokenFor(user, ttl = 3600) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const unsigned = `${part({ alg: "HS256", typ: "JWT" })}.${part({ sub: user, tenant_id: "browser", exp: Math.floor(Date.now() / 1000) + ttl })}`;
  return `${unsigned}.${createHmac("sha256", SECRET).update(unsigned).digest("base64url")}`;
}

/** A token for a user of its own, so a test's data and rate limit are its own. */
const freshToken = (label) => tokenFor(`browser-${label}-${randomUUID()}`);

async function api(path, token = TOKEN, init = {}) {
  const response = await fetch(BASE + path, {
    ...init,
    headers: { authorization: `Bearer ${token}`, ...(init.headers || {}) },
  });
  return { status: response.status, headers: response.headers, body: await response.json().catch(() => null) };
}

/** Every stored message of a session (all pages), or null when the session does not exist. */
async function stored(session, token = TOKEN) {
  const items = [];
  let path = `/api/chat/sessions/${encodeURIComponent(session)}/messages?limit=500`;
  for (;;) {
    const { status, body } = await api(path, token);
    if (status === 404) return null;
    assert(status === 200, `messages answered ${status}: ${JSON.stringify(body)}`);
    items.push(...body.items);
    if (!body.next_cursor) return items;
    path = `/api/chat/sessions/${encodeURIComponent(session)}/messages?limit=500&cursor=${body.next_cursor}`;
  }
}

/** Polls until `count` messages are stored (beacons are asynchronous), then returns them. */
async function waitForStored(session, count, token = TOKEN, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let items = null;
  while (Date.now() < deadline) {
    items = await stored(session, token);
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

// ---- Cross-origin use: a page served from another origin (a tiny server of this test). ----

/** Serves a blank page on PAGE_PORT (reachable as PAGE_ORIGIN and as STRANGER_ORIGIN). */
function servePage() {
  const server = createServer((request, response) => {
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    response.end("<!doctype html><meta charset=utf-8><title>another origin</title><p>a page of another origin</p>");
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(PAGE_PORT, "127.0.0.1", () => resolve(server));
  });
}

async function openOtherOrigin(context, origin = PAGE_ORIGIN) {
  const page = await context.newPage();
  await page.goto(`${origin}/`);
  return page;
}

/** Every response header the OpenAPI document names, lowercased. */
async function documentedHeaders() {
  const spec = await (await fetch(`${BASE}/openapi.json`)).json();
  const names = new Set();
  for (const operations of Object.values(spec.paths)) {
    for (const operation of Object.values(operations)) {
      for (let answer of Object.values(operation.responses || {})) {
        if (answer.$ref) answer = spec.components.responses[answer.$ref.split("/").at(-1)];
        for (const name of Object.keys(answer.headers || {})) names.add(name.toLowerCase());
      }
    }
  }
  return names;
}

test("a page on another origin sends every allowed header and reads every exposed one", async (context) => {
  const token = freshToken("cors");
  const limited = freshToken("cors-limited");
  // What mnemo tells browsers they may read; every header the API documents must be among them.
  const me = await api("/api/me", token, { headers: { origin: PAGE_ORIGIN } });
  assert(me.headers.get("access-control-allow-origin") === PAGE_ORIGIN, "the page's origin is allowed");
  const exposed = me.headers.get("access-control-expose-headers").split(",").map((h) => h.trim().toLowerCase());
  for (const name of await documentedHeaders()) assert(exposed.includes(name), `${name} is documented but not exposed: ${exposed}`);
  // Something to page through: a memory of 40 lines and a task artifact of 100 bytes.
  const key = `cors-${randomUUID().slice(0, 8)}`;
  const content = Array.from({ length: 40 }, (_, i) => `line ${i + 1}`).join("\n") + "\n";
  assert((await api(`/api/memories/${key}`, token, { method: "PUT", headers: { "content-type": "application/json" }, body: JSON.stringify({ content }) })).status === 201, "memory stored");
  const task = await api("/api/tasks", token, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "cors task" }) });
  assert(task.status === 201, `task: ${JSON.stringify(task.body)}`);
  const artifact = await api(`/api/tasks/${task.body.id}/artifacts?name=digits.txt`, token, { method: "POST", headers: { "content-type": "application/octet-stream" }, body: "0123456789".repeat(10) });
  assert(artifact.status === 201, `artifact: ${JSON.stringify(artifact.body)}`);

  const page = await openOtherOrigin(context);
  const session = `cors-${randomUUID()}`;
  const got = await page.evaluate(async ({ base, token, limited, key, artifactPath, session }) => {
    const seen = {};
    const status = {};
    const keep = (response, names) => {
      for (const name of names) {
        const value = response.headers.get(name);
        if (value !== null) seen[name] = value;
      }
      return response;
    };
    const auth = { authorization: `Bearer ${token}` };
    // Any answer: the request id (the page's own is kept) and the rate-limit state.
    let r = await fetch(`${base}/api/me`, { headers: { ...auth, "x-request-id": "cross-origin-request-1" } });
    keep(r, ["x-request-id", "ratelimit", "ratelimit-policy"]);
    // Conditional requests on the notes: ETag, If-None-Match (304), If-Match (write, then 412).
    const notes = `${base}/api/agents/assistant/notes`;
    r = keep(await fetch(notes, { headers: auth }), ["etag"]);
    const first = r.headers.get("etag");
    status.unchanged = (await fetch(notes, { headers: { ...auth, "if-none-match": first } })).status;
    const put = (etag) => fetch(notes, { method: "PUT", headers: { ...auth, "content-type": "application/json", "if-match": etag }, body: JSON.stringify({ notes: "# from another origin\n" }) });
    r = await put(first);
    status.written = r.status;
    status.newEtag = r.headers.get("etag");
    status.stale = (await put(first)).status;
    // An idempotent retry: the second answer is the first one, replayed.
    const idempotencyKey = crypto.randomUUID();
    const batch = JSON.stringify({ session_id: session, messages_batch: [{ id: "m1", text: "hello from another origin", sender: "user", timestamp: new Date().toISOString() }] });
    const archive = () => fetch(`${base}/api/chat/session/archive_messages`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json", "idempotency-key": idempotencyKey },
      body: batch,
    });
    const once = await (await archive()).json();
    r = keep(await archive(), ["idempotent-replayed"]);
    status.replayedSame = JSON.stringify(await r.json()) === JSON.stringify(once) && once.new === 1;
    // A raw page of a memory: its range, lines and the next page in headers.
    r = keep(await fetch(`${base}/api/memories/${key}?line_start=1&line_count=5`, { headers: { ...auth, accept: "text/plain" } }), ["x-memory-range", "x-memory-lines", "x-memory-next"]);
    status.memoryText = await r.text();
    // A byte range of an artifact.
    r = keep(await fetch(`${base}${artifactPath}`, { headers: { ...auth, range: "bytes=10-19" } }), ["content-range", "accept-ranges"]);
    status.range = r.status;
    status.rangeText = await r.text();
    // An MCP client in the page: `initialize` answers the session id it must send back.
    const initialize = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "page", version: "1" } } };
    r = keep(await fetch(`${base}/mcp`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" },
      body: JSON.stringify(initialize),
    }), ["mcp-session-id"]);
    status.mcp = r.status;
    status.mcpText = await r.text();
    // Without a token: the challenge names where to find the authorization server.
    r = keep(await fetch(`${base}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify(initialize),
    }), ["www-authenticate"]);
    status.challenge = r.status;
    // Over the rate limit: 429 with Retry-After (another user, so the first is not held back).
    for (let round = 0; round < 20 && status.limited === undefined; round += 1) {
      const answers = await Promise.all(Array.from({ length: 40 }, () => fetch(`${base}/api/me`, { headers: { authorization: `Bearer ${limited}` } })));
      const refused = answers.find((a) => a.status === 429);
      if (refused) {
        status.limited = 429;
        status.limitedHeaders = { "retry-after": refused.headers.get("retry-after"), ratelimit: refused.headers.get("ratelimit") };
        keep(refused, ["retry-after"]);
      }
    }
    return { seen, status };
  }, { base: BASE, token, limited, key, artifactPath: `/api/tasks/${task.body.id}/artifacts/${artifact.body.artifact_id}`, session });
  const { seen, status } = got;
  const all = JSON.stringify(got);
  const missing = exposed.filter((name) => !(name in seen));
  assert(missing.length === 0, `exposed headers the page could not read: ${missing} (${all})`);
  assert(seen["x-request-id"] === "cross-origin-request-1", `the page's request id: ${all}`);
  assert(/"user";r=\d+/.test(seen.ratelimit) && /"user";q=\d+;w=1/.test(seen["ratelimit-policy"]), `rate-limit headers: ${all}`);
  assert(status.unchanged === 304 && status.written === 200 && status.stale === 412, `conditional requests: ${all}`);
  assert(/^"\d+"$/.test(seen.etag) && status.newEtag !== seen.etag, `etags: ${all}`);
  assert(seen["idempotent-replayed"] === "true" && status.replayedSame, `idempotent replay: ${all}`);
  assert(seen["x-memory-range"].startsWith("bytes 0-") && seen["x-memory-lines"] === "1-5/40", `memory page: ${all}`);
  assert(seen["x-memory-next"].includes("line_start=6") && status.memoryText === "line 1\nline 2\nline 3\nline 4\nline 5\n", `memory page: ${all}`);
  assert(status.range === 206 && seen["content-range"] === "bytes 10-19/100" && status.rangeText === "0123456789" && seen["accept-ranges"] === "bytes", `range: ${all}`);
  assert(status.mcp === 200 && status.mcpText.includes('"name":"mnemo"') && /^[0-9a-f-]{36}$/.test(seen["mcp-session-id"]), `MCP from the page: ${all}`);
  assert(status.challenge === 401 && /resource_metadata="/.test(seen["www-authenticate"] || ""), `the 401 challenge from the page: ${all}`);
  assert(status.limited === 429 && Number(seen["retry-after"]) >= 1 && /r=0/.test(status.limitedHeaders.ratelimit), `429: ${all}`);
  assertExactlyOnce(await stored(session, token), ["hello from another origin"]);
  await page.close();
});

test("a page on an origin mnemo does not allow cannot read its answers", async (context) => {
  const page = await openOtherOrigin(context, STRANGER_ORIGIN);
  const outcome = await page.evaluate(async ({ base, token }) => {
    try {
      const r = await fetch(`${base}/api/me`, { headers: { authorization: `Bearer ${token}` } });
      return `read ${r.status}`;
    } catch (err) {
      return `refused: ${err.name}`;
    }
  }, { base: BASE, token: TOKEN });
  assert(outcome === "refused: TypeError", `a stranger's fetch: ${outcome}`);
  await page.close();
});

test("a cross-origin sendBeacon (text/plain, the token in the body) stores its messages", async (context) => {
  const token = freshToken("beacon");
  const page = await openOtherOrigin(context);
  const preflights = [];
  page.on("request", (request) => {
    if (request.method() === "OPTIONS") preflights.push(request.url());
  });
  const session = `cross-beacon-${randomUUID()}`;
  const queued = await page.evaluate(({ base, token, session }) => {
    const at = Date.now();
    const body = JSON.stringify({
      access_token: token,
      session_id: session,
      messages_batch: [
        { id: "b1", text: "sent as the page closed", sender: "user", timestamp: new Date(at).toISOString() },
        { id: "b2", text: "and its answer", sender: "ai", timestamp: new Date(at + 1).toISOString() },
      ],
    });
    return navigator.sendBeacon(`${base}/api/chat/session/archive_messages/beacon`, new Blob([body], { type: "text/plain;charset=UTF-8" }));
  }, { base: BASE, token, session });
  assert(queued === true, "the browser queued the beacon");
  assertExactlyOnce(await waitForStored(session, 2, token), ["sent as the page closed", "and its answer"]);
  assert(preflights.length === 0, `a CORS-simple request needs no preflight: ${preflights}`);
  await page.close();
});

// ---- The archiver's retry path, on a page of mnemo's own origin. ----

/** A page of mnemo's origin with ChatArchiver loaded as `window.ChatArchiver`. */
async function archiverPage(context) {
  const page = await context.newPage();
  await page.goto(`${BASE}/readyz`);
  await page.evaluate(async () => {
    window.ChatArchiver = (await import("/demo/chat-archiver.js")).ChatArchiver;
  });
  return page;
}

const ARCHIVE_URL = `${BASE}/api/chat/session/archive_messages`;

test("503 then 200: the batch lands once, after Retry-After, under one idempotency key", async (context) => {
  const token = freshToken("retry");
  const session = `retry-${randomUUID()}`;
  const page = await archiverPage(context);
  const attempts = [];
  await page.route(ARCHIVE_URL, async (route) => {
    attempts.push({ at: Date.now(), key: route.request().headers()["idempotency-key"] });
    if (attempts.length === 1) {
      // The batch reaches mnemo and is stored, but its answer is lost: the page sees a 503.
      const real = await route.fetch();
      attempts[0].real = real.status();
      await route.fulfill({
        status: 503,
        headers: { "retry-after": "1", "content-type": "application/problem+json" },
        body: JSON.stringify({ title: "Service Unavailable", status: 503 }),
      });
    } else {
      await route.continue();
    }
  });
  const result = await page.evaluate(async ({ token, session }) => {
    const archiver = new window.ChatArchiver({ token, sessionId: session, everyMessages: 0, everySeconds: 0, backoffMs: 10, maxRetries: 3 });
    archiver.add({ id: "a", text: "first", sender: "user" });
    archiver.add({ id: "b", text: "second", sender: "ai", timestamp: Date.now() + 1 });
    const answer = await archiver.flush();
    return { answer, pending: archiver.pending().length };
  }, { token, session });
  const all = JSON.stringify({ attempts, result });
  assert(attempts.length === 2 && attempts[0].real === 200, `one lost answer, one retry: ${all}`);
  assert(attempts[0].key && attempts[0].key === attempts[1].key, `the same Idempotency-Key: ${all}`);
  assert(attempts[1].at - attempts[0].at >= 900, `the retry waited for Retry-After (1 s), not the 10 ms backoff: ${all}`);
  // The replayed first answer: two new messages (a retry without the key would count duplicates).
  assert(result.answer.new === 2 && result.answer.duplicates === 0 && result.pending === 0, `answer: ${all}`);
  assertExactlyOnce(await stored(session, token), ["first", "second"]);
  await page.close();
});

test("offline and back: the batch waits for the network, then lands once with what came meanwhile", async (context) => {
  const token = freshToken("offline");
  const session = `offline-${randomUUID()}`;
  const page = await archiverPage(context);
  await page.evaluate(({ token, session }) => {
    window.archiver = new window.ChatArchiver({ token, sessionId: session, everyMessages: 0, everySeconds: 0, backoffMs: 10, maxRetries: 2 }).start();
  }, { token, session });
  await context.setOffline(true);
  try {
    await page.evaluate(() => {
      window.archiver.add({ id: "o1", text: "written offline", sender: "user" });
      window.archiver.add({ id: "o2", text: "still offline", sender: "ai", timestamp: Date.now() + 1 });
      window.archiver.flush().then((r) => { window.result = r; }, (e) => { window.failure = String(e); });
    });
    // Far longer than the three attempts' backoff: a client spending its retries would have failed.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const waiting = await page.evaluate(() => ({ offline: navigator.onLine === false, result: window.result, failure: window.failure }));
    assert(waiting.offline && waiting.result === undefined && waiting.failure === undefined, `still waiting: ${JSON.stringify(waiting)}`);
    await page.evaluate(() => window.archiver.add({ id: "o3", text: "one more", sender: "user", timestamp: Date.now() + 2 }));
    assert((await stored(session, token)) === null, "nothing arrived while offline");
  } finally {
    await context.setOffline(false);
  }
  await page.waitForFunction(() => window.result !== undefined || window.failure !== undefined);
  const outcome = await page.evaluate(() => ({ result: window.result, failure: window.failure }));
  assert(outcome.result && outcome.result.new === 2, `the waiting batch landed: ${JSON.stringify(outcome)}`);
  // Back online, the archiver also sends what was added meanwhile.
  assertExactlyOnce(await waitForStored(session, 3, token), ["written offline", "still offline", "one more"]);
  await page.waitForFunction(() => window.archiver.pending().length === 0);
  await page.close();
});

test("a rejected token is replaced through getToken, once, and beacons use the fresh one", async (context) => {
  const user = `browser-refresh-${randomUUID()}`;
  const expired = tokenFor(user, -3600);
  const fresh = tokenFor(user);
  const session = `refresh-${randomUUID()}`;
  const page = await archiverPage(context);
  const sent = [];
  page.on("request", (request) => {
    if (request.url() === ARCHIVE_URL && request.method() === "POST") sent.push(request.headers().authorization);
  });
  const result = await page.evaluate(async ({ expired, fresh, session }) => {
    const calls = [];
    window.archiver = new window.ChatArchiver({
      sessionId: session,
      everyMessages: 0,
      everySeconds: 0,
      backoffMs: 10,
      // An identity provider: the cached token until asked for a fresh one.
      getToken: async ({ refresh }) => {
        calls.push(Boolean(refresh));
        await new Promise((resolve) => setTimeout(resolve, 5));
        return refresh ? fresh : expired;
      },
    });
    window.archiver.add({ id: "t1", text: "before the refresh", sender: "user" });
    const answer = await window.archiver.flush();
    const asked = calls.slice();
    window.archiver.add({ id: "t2", text: "sent by beacon", sender: "user", timestamp: Date.now() + 1 });
    return { answer, calls: asked, beaconToken: JSON.parse(window.archiver.beaconChunks()[0]).access_token === fresh };
  }, { expired, fresh, session });
  const all = JSON.stringify({ result, sent: sent.length });
  assert(result.answer.new === 1, `archived after the refresh: ${all}`);
  assert(JSON.stringify(result.calls) === "[false,true]", `one ordinary call, one refresh: ${all}`);
  assert(sent.length === 2 && sent[0] === `Bearer ${expired}` && sent[1] === `Bearer ${fresh}`, `401, then the fresh token: ${all}`);
  assert(result.beaconToken, `the beacon carries the fresh token: ${all}`);
  await page.evaluate(() => window.archiver.flushWithBeacon());
  assertExactlyOnce(await waitForStored(session, 2, fresh), ["before the refresh", "sent by beacon"]);
  await page.close();
});

test("the unload beacon after a failed periodic archive carries the unsent messages", async (context) => {
  const token = freshToken("unload");
  const session = `unload-${randomUUID()}`;
  const page = await archiverPage(context);
  let refused = 0;
  await page.route(ARCHIVE_URL, async (route) => {
    refused += 1;
    await route.fulfill({ status: 502, headers: { "content-type": "application/problem+json" }, body: JSON.stringify({ title: "Bad Gateway", status: 502 }) });
  });
  await page.evaluate(({ token, session }) => {
    window.errors = [];
    window.archiver = new window.ChatArchiver({
      token, sessionId: session, everyMessages: 0, everySeconds: 1, backoffMs: 10, maxRetries: 1,
      onError: (err) => window.errors.push(err.status),
    }).start();
    const at = Date.now();
    window.archiver.add({ id: "u1", text: "asked", sender: "user", timestamp: at });
    window.archiver.add({ id: "u2", text: "answered", sender: "ai", timestamp: at + 1 });
    window.archiver.add({ id: "u3", text: "thanked", sender: "user", timestamp: at + 2 });
  }, { token, session });
  // The periodic archive runs, is refused twice (one retry) and gives up.
  await page.waitForFunction(() => window.errors.length >= 1, null, { timeout: 10000 });
  assert(refused >= 2, `the periodic archive tried and retried: ${refused}`);
  assert((await page.evaluate(() => window.archiver.pending().length)) === 3, "all three are still unsent");
  assert((await stored(session, token)) === null, "nothing stored yet");
  await page.close({ runBeforeUnload: true });
  assertExactlyOnce(await waitForStored(session, 3, token), ["asked", "answered", "thanked"]);
});

const userDataDir = mkdtempSync(join(tmpdir(), "mnemo-chromium-"));
let passed = 0;
let failed = 0;
let context;
let pageServer;
try {
  pageServer = await servePage();
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
  if (pageServer) pageServer.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
