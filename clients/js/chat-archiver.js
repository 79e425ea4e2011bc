// ChatArchiver: buffers a chat's messages in the browser and archives them to mnemo in batches.
//
// - every `everyMessages` new messages, or every `everySeconds` seconds, the messages not yet
//   confirmed are sent with fetch to POST /api/chat/session/archive_messages; failures (network
//   errors, 408, 429, 5xx) are retried with exponential backoff, waiting at least what a
//   `Retry-After` header asks; every attempt of one batch carries the same `Idempotency-Key`, so a
//   retry of a batch that was stored but whose answer was lost replays the first answer;
// - while the browser is offline (`navigator.onLine` false) a failed batch waits for the `online`
//   event instead of spending its retries; messages added meanwhile queue up for the next batch;
// - a 401 asks `getToken({ refresh: true })` once for a fresh token and sends again (`getToken`
//   may return a promise);
// - on `pagehide` or `visibilitychange` to hidden, whatever is still unconfirmed is sent with
//   navigator.sendBeacon to .../archive_messages/beacon (the token travels in the body, because a
//   beacon cannot carry headers), split into chunks under `beaconMaxBytes`;
// - `update(id, {text})` changes a message (an AI reply that was still streaming, an edit) and
//   `remove(id)` deletes it: the next archive sends the new state with `edited_at`, and the
//   server updates (or deletes) the stored message in place;
// - without a `sessionId` the first archive lets the server make one, and the archiver uses it
//   from then on (`onSession` is told).
//
// Browsers also cap the keepalive data in flight per page (Chromium: 64 KiB in total), so an
// unload can deliver only about that much: archive periodically to keep the unconfirmed tail small.
// Beacons the browser refuses are counted out of `flushWithBeacon()`'s return value.
//
// No dependencies; works in any modern browser (and in Node 18+ with fetch, minus the beacon).

const ARCHIVE_PATH = "/api/chat/session/archive_messages";
const BEACON_PATH = "/api/chat/session/archive_messages/beacon";

function randomId() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === "function") {
    return globalThis.crypto.randomUUID();
  }
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

function toWire(message) {
  const ts = message.timestamp instanceof Date ? message.timestamp : new Date(message.timestamp);
  const wire = { id: message.id, text: message.text, sender: message.sender, timestamp: ts.toISOString() };
  if (message.editedAt) wire.edited_at = message.editedAt.toISOString();
  return wire;
}

/** Which state of a message an entry carries: its edit time in ms, 0 as first written. */
const revision = (entry) => (entry.editedAt ? entry.editedAt.getTime() : 0);

/** An edit time later than `previous` (so the states of one message stay ordered). */
function editTime(previous) {
  const now = Date.now();
  return new Date(previous && previous.getTime() >= now ? previous.getTime() + 1 : now);
}

/** Longest wait a `Retry-After` header may impose, in ms. */
const MAX_RETRY_AFTER_MS = 60000;

/** The wait a `Retry-After` header asks for, in ms (seconds or an HTTP date), or null. */
function retryAfterMs(response) {
  const value = response.headers && response.headers.get("retry-after");
  if (!value) return null;
  const seconds = Number(value);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(value) - Date.now();
  return Number.isFinite(ms) ? Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS) : null;
}

const isOffline = () => globalThis.navigator && globalThis.navigator.onLine === false;

/** Resolves when the browser is back online (at once when it is). */
function online() {
  if (!isOffline() || !globalThis.addEventListener) return Promise.resolve();
  return new Promise((resolve) => globalThis.addEventListener("online", () => resolve(), { once: true }));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const encoder = new TextEncoder();
const byteLength = (text) => encoder.encode(text).length;

export class ChatArchiver {
  /**
   * @param {import("./chat-archiver").ChatArchiverOptions} options
   */
  constructor(options) {
    if (!options) throw new Error("ChatArchiver: options are required");
    if (!options.token && !options.getToken) throw new Error("ChatArchiver: token or getToken is required");
    this.baseUrl = (options.baseUrl || "").replace(/\/$/, "");
    /** The session; null until the server made one when none was given. */
    this.sessionId = options.sessionId || null;
    this.agentId = options.agentId || "assistant";
    this.tokenSource = options.getToken || (() => options.token);
    /** The last token obtained (beacons, which cannot wait for a promise, use it). */
    this.token = options.token || null;
    this.everyMessages = options.everyMessages ?? 10;
    this.everySeconds = options.everySeconds ?? 60;
    this.maxRetries = options.maxRetries ?? 5;
    this.backoffMs = options.backoffMs ?? 500;
    this.beaconMaxBytes = options.beaconMaxBytes ?? 60000;
    this.fetch = options.fetch || globalThis.fetch.bind(globalThis);
    this.onArchived = options.onArchived || (() => {});
    this.onError = options.onError || (() => {});
    this.onSession = options.onSession || (() => {});
    /** @type {Array<{id: string, text: string, sender: "user"|"ai", timestamp: Date, editedAt?: Date}>} */
    this.messages = [];
    /** Deleted messages the server has not confirmed yet: id -> time of the deletion. */
    this.deletions = new Map();
    /** Message id -> the revision the server confirmed. */
    this.confirmed = new Map();
    this.sinceFlush = 0;
    this.inFlight = null;
    this.timer = null;
    this.listening = false;
    this.onPageHide = () => this.flushWithBeacon();
    this.onOnline = () => {
      if (this.outgoing().length > 0) this.flush().catch(() => {});
    };
    this.onVisibility = () => {
      if (globalThis.document && globalThis.document.visibilityState === "hidden") this.flushWithBeacon();
    };
  }

  /**
   * The token to send; with `refresh`, a fresh one (after a 401). `getToken` may return a string
   * or a promise of one.
   */
  async getToken(refresh = false) {
    const token = await this.tokenSource(refresh ? { refresh: true } : {});
    if (token) this.token = token;
    return token;
  }

  /** The last token known without waiting: for beacons, sent during unload. */
  currentToken() {
    let token = null;
    try {
      token = this.tokenSource({});
    } catch {
      // Keep the last one.
    }
    if (typeof token === "string" && token) this.token = token;
    return this.token;
  }

  /** Starts the periodic timer and the unload listeners. */
  start() {
    // A token at hand before the first archive, should the page close before it.
    if (!this.token) Promise.resolve().then(() => this.getToken()).catch(() => {});
    if (!this.timer && this.everySeconds > 0) {
      this.timer = setInterval(() => {
        if (this.outgoing().length > 0) this.flush().catch(() => {});
      }, this.everySeconds * 1000);
    }
    if (!this.listening && globalThis.addEventListener) {
      globalThis.addEventListener("pagehide", this.onPageHide);
      globalThis.addEventListener("online", this.onOnline);
      globalThis.document?.addEventListener("visibilitychange", this.onVisibility);
      this.listening = true;
    }
    return this;
  }

  /** Stops the timer and removes the listeners (buffered messages stay). */
  stop() {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.listening) {
      globalThis.removeEventListener("pagehide", this.onPageHide);
      globalThis.removeEventListener("online", this.onOnline);
      globalThis.document?.removeEventListener("visibilitychange", this.onVisibility);
      this.listening = false;
    }
  }

  /**
   * Buffers a message; archives when `everyMessages` have gathered since the last archive.
   * @returns the stored message (with its id and timestamp filled in)
   */
  add(message) {
    const stored = {
      id: message.id || randomId(),
      text: String(message.text ?? ""),
      sender: message.sender === "ai" ? "ai" : "user",
      timestamp: message.timestamp ? new Date(message.timestamp) : new Date(),
    };
    this.messages.push(stored);
    this.sinceFlush += 1;
    if (this.everyMessages > 0 && this.sinceFlush >= this.everyMessages) {
      this.flush().catch(() => {});
    }
    return stored;
  }

  /**
   * Changes a buffered message (e.g. the rest of a streamed AI reply arrived, or the user edited
   * it); the next archive sends the new state, which updates the stored message.
   * @returns the changed message, or null when no message has this id
   */
  update(id, changes) {
    const message = this.messages.find((m) => m.id === id);
    if (!message) return null;
    if (changes && changes.text !== undefined) message.text = String(changes.text);
    if (changes && (changes.sender === "ai" || changes.sender === "user")) message.sender = changes.sender;
    message.editedAt = editTime(message.editedAt);
    return message;
  }

  /**
   * Deletes a message: it leaves `messages`, and the next archive deletes the stored one.
   * @returns true when a message had this id
   */
  remove(id) {
    const index = this.messages.findIndex((m) => m.id === id);
    if (index < 0) return false;
    const [message] = this.messages.splice(index, 1);
    this.confirmed.delete(id);
    // Sent even when no archive confirmed the message: one may have stored it without answering.
    this.deletions.set(id, editTime(message.editedAt));
    return true;
  }

  /** Messages whose current state the server has not confirmed yet. */
  pending() {
    return this.messages.filter((m) => this.confirmed.get(m.id) !== revision(m));
  }

  /** What the next archive sends: unconfirmed messages and deletions, with their revisions. */
  outgoing() {
    const out = this.pending().map((m) => ({ id: m.id, rev: revision(m), wire: toWire(m) }));
    for (const [id, at] of this.deletions) {
      out.push({ id, rev: at.getTime(), deletion: true, wire: { id, deleted: true, edited_at: at.toISOString() } });
    }
    return out;
  }

  /** Takes the session id the server made, if this archiver had none yet. */
  adoptSession(sessionId) {
    if (this.sessionId || !sessionId) return;
    this.sessionId = sessionId;
    this.onSession(sessionId);
  }

  /** Archives every unconfirmed message with fetch, retrying with backoff. */
  async flush() {
    if (this.inFlight) {
      // One request at a time; what arrives meanwhile goes in the next one (and a server-made
      // session id of this one is known by then).
      await this.inFlight.catch(() => {});
    }
    const batch = this.outgoing();
    if (batch.length === 0) return { new: 0, updated: 0, deleted: 0, duplicates: 0 };
    this.sinceFlush = 0;
    this.inFlight = this.send(batch);
    try {
      return await this.inFlight;
    } finally {
      this.inFlight = null;
    }
  }

  /** Records what the server confirmed: the sent revisions (unless changed since). */
  confirm(batch) {
    for (const entry of batch) {
      if (entry.deletion) {
        const at = this.deletions.get(entry.id);
        if (at && at.getTime() === entry.rev) this.deletions.delete(entry.id);
      } else if (this.messages.some((m) => m.id === entry.id)) {
        this.confirmed.set(entry.id, entry.rev);
      }
    }
  }

  async send(batch) {
    const body = JSON.stringify({
      ...(this.sessionId ? { session_id: this.sessionId } : {}),
      agent_id: this.agentId,
      messages_batch: batch.map((entry) => entry.wire),
    });
    // One key for every attempt of this batch: a retry of a batch that was stored, but whose
    // answer was lost, gets the first answer back instead of counting duplicates.
    const idempotencyKey = randomId();
    let lastError = null;
    let refreshed = false;
    let token = null;
    for (let attempt = 0; attempt <= this.maxRetries; attempt += 1) {
      let wait = null;
      try {
        if (isOffline()) await online();
        if (token === null) token = await this.getToken();
        const response = await this.fetch(this.baseUrl + ARCHIVE_PATH, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            authorization: `Bearer ${token}`,
            "idempotency-key": idempotencyKey,
          },
          body,
        });
        if (response.ok) {
          const result = await response.json();
          this.adoptSession(result.session_id);
          this.confirm(batch);
          this.onArchived(result, batch.length);
          return result;
        }
        const problem = await response.json().catch(() => ({}));
        lastError = new Error(`archive failed: ${response.status} ${problem.detail || ""}`.trim());
        lastError.status = response.status;
        if (response.status === 401 && !refreshed) {
          // An expired or revoked token: ask for a fresh one once, and send again at once.
          refreshed = true;
          token = await this.getToken(true);
          attempt -= 1;
          continue;
        }
        // Client errors other than 408/429 will not get better by retrying.
        if (response.status < 500 && response.status !== 408 && response.status !== 429) break;
        wait = retryAfterMs(response);
      } catch (err) {
        lastError = err;
        if (isOffline()) {
          // Offline: wait for the network instead of spending the retries.
          await online();
          attempt -= 1;
          continue;
        }
      }
      if (attempt < this.maxRetries) {
        const backoff = this.backoffMs * 2 ** attempt * (0.5 + Math.random() / 2);
        await sleep(Math.max(backoff, wait ?? 0));
      }
    }
    this.onError(lastError);
    throw lastError;
  }

  /**
   * Splits the unconfirmed messages into beacon bodies under `beaconMaxBytes` each.
   * A single message too large for a beacon is left to the next fetch flush. Without a session
   * id yet (no archive has answered), one is made here, so that all chunks land in one session.
   */
  beaconChunks() {
    if (!this.sessionId && this.outgoing().length > 0) this.adoptSession(randomId());
    const head = {
      access_token: this.currentToken(),
      session_id: this.sessionId,
      agent_id: this.agentId,
      messages_batch: [],
    };
    const emptyBytes = byteLength(JSON.stringify(head));
    const chunks = [];
    let current = [];
    let size = emptyBytes;
    for (const { wire } of this.outgoing()) {
      const bytes = byteLength(JSON.stringify(wire)) + 1;
      if (emptyBytes + bytes > this.beaconMaxBytes) continue;
      if (size + bytes > this.beaconMaxBytes && current.length > 0) {
        chunks.push(current);
        current = [];
        size = emptyBytes;
      }
      current.push(wire);
      size += bytes;
    }
    if (current.length > 0) chunks.push(current);
    return chunks.map((batch) => JSON.stringify({ ...head, messages_batch: batch }));
  }

  /**
   * Sends everything unconfirmed with navigator.sendBeacon (text/plain, a CORS-simple request).
   * @returns the number of beacons the browser accepted
   */
  flushWithBeacon() {
    const nav = globalThis.navigator;
    if (!nav || typeof nav.sendBeacon !== "function") return 0;
    let queued = 0;
    for (const body of this.beaconChunks()) {
      const blob = new Blob([body], { type: "text/plain;charset=UTF-8" });
      if (nav.sendBeacon(this.baseUrl + BEACON_PATH, blob)) queued += 1;
    }
    return queued;
  }
}

export default ChatArchiver;
