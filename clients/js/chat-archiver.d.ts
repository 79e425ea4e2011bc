/** A chat message as the browser holds it. */
export interface ChatMessage {
  id: string;
  text: string;
  sender: "user" | "ai";
  timestamp: Date;
  /** Set by `update`: when the message last changed (sent as `edited_at`). */
  editedAt?: Date;
}

/** What `add` accepts: id and timestamp are filled in when missing. */
export interface NewChatMessage {
  id?: string;
  text: string;
  sender: "user" | "ai";
  timestamp?: Date | string | number;
}

/** The server's answer to an archive batch. */
export interface ArchiveResult {
  /** The session: the one sent, or the one the server made. */
  session_id: string;
  batch_id: string;
  new: number;
  /** Stored messages changed by this archive. */
  updated: number;
  /** Stored messages deleted by this archive. */
  deleted: number;
  duplicates: number;
}

export interface ChatArchiverOptions {
  /** Origin of mnemo, e.g. `https://mnemo.example.com`; empty for the page's own origin. */
  baseUrl?: string;
  /**
   * The chat session (e.g. a UUID kept for the conversation). Absent: the first archive lets the
   * server make one, which the archiver then uses (see `onSession`).
   */
  sessionId?: string;
  /** The agent the session talks to (default `assistant`). */
  agentId?: string;
  /** A bearer token (JWT); or `getToken` for tokens that refresh. */
  token?: string;
  /**
   * The token to send (a string or a promise of one). After a 401 the archiver calls it once
   * with `{ refresh: true }` and sends again with what it returns. Beacons (sent while the page
   * unloads, unable to wait) use the last token it returned.
   */
  getToken?: (options: { refresh?: boolean }) => string | Promise<string>;
  /** Archive after this many new messages (default 10; 0 disables). */
  everyMessages?: number;
  /** Archive every this many seconds when something is pending (default 60; 0 disables). */
  everySeconds?: number;
  /**
   * Retries of a failed archive (default 5), with exponential backoff from `backoffMs` (500), and
   * at least as long as a `Retry-After` header asks (at most 60 s). Every attempt of one batch
   * sends the same `Idempotency-Key`. Offline, a batch waits for the `online` event without
   * spending retries.
   */
  maxRetries?: number;
  backoffMs?: number;
  /** Largest beacon body in bytes (default 60000; browsers cap beacons near 64 KiB). */
  beaconMaxBytes?: number;
  /** The fetch to use (default the global one). */
  fetch?: typeof fetch;
  onArchived?: (result: ArchiveResult, sent: number) => void;
  onError?: (error: Error) => void;
  /** Called once when the archiver takes a session id it did not have (made by the server). */
  onSession?: (sessionId: string) => void;
}

export declare class ChatArchiver {
  constructor(options: ChatArchiverOptions);
  /** Every message added (and not removed), in order. */
  readonly messages: ChatMessage[];
  /** The session; null until the server made one when none was given. */
  readonly sessionId: string | null;
  /** Starts the periodic timer and the `pagehide` / `visibilitychange` / `online` listeners. */
  start(): this;
  /** Stops the timer and removes the listeners. */
  stop(): void;
  /** Buffers a message; archives when `everyMessages` have gathered. */
  add(message: NewChatMessage): ChatMessage;
  /** Changes a message (its text, or sender); the next archive updates the stored one. */
  update(id: string, changes: { text?: string; sender?: "user" | "ai" }): ChatMessage | null;
  /** Deletes a message; the next archive deletes the stored one. */
  remove(id: string): boolean;
  /** Messages whose current state the server has not confirmed yet. */
  pending(): ChatMessage[];
  /** Takes a session id the server made (e.g. in a `/api/chat` answer) if none is set yet. */
  adoptSession(sessionId: string): void;
  /** Archives every unconfirmed message and deletion with fetch, retrying with backoff. */
  flush(): Promise<ArchiveResult | { new: 0; updated: 0; deleted: 0; duplicates: 0 }>;
  /** The beacon bodies a flush would send now (each under `beaconMaxBytes`). */
  beaconChunks(): string[];
  /** Sends the unconfirmed messages with `navigator.sendBeacon`; returns beacons queued. */
  flushWithBeacon(): number;
}

export default ChatArchiver;
