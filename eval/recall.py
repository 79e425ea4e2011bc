#!/usr/bin/env python3
"""Retrieval evaluation of mnemo's memory search on the dialogues in eval/dataset.

For each conversation a fresh user (a token minted here, HS256 with MNEMO_JWT_SECRET) stores every
turn as a detail memory, then each question is searched in each requested mode. A question is
answered when its evidence turns come back: recall@k, MRR and per-category recall are reported
next to an Okapi BM25 baseline computed here over the same stored strings.

Standard library only. Exit status: 0 on a finished run, 1 when the server refuses the ingest or
the dataset is broken, 2 when the server cannot be reached.
"""

import argparse
import base64
import collections
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import statistics
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

KEY_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
WORD_RE = re.compile(r"[a-z0-9]+")
BACKLOG_RE = re.compile(r"^mnemo_embedding_backlog(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)
SEMANTIC_MODES = {"semantic", "hybrid"}

# A standard English stopword list (the classic ~180-word list used by common IR toolkits).
STOPWORDS = frozenset("""
a about above after again against ain all am an and any are aren aren't as at be because been
before being below between both but by can couldn couldn't d did didn didn't do does doesn
doesn't doing don don't down during each few for from further had hadn hadn't has hasn hasn't
have haven haven't having he her here hers herself him himself his how i if in into is isn isn't
it it's its itself just ll m ma me mightn mightn't more most mustn mustn't my myself needn
needn't no nor not now o of off on once only or other our ours ourselves out over own re s same
shan shan't she she's should should've shouldn shouldn't so some such t than that that'll the
their theirs them themselves then there these they this those through to too under until up ve
very was wasn wasn't we were weren weren't what when where which while who whom why will with
won won't wouldn wouldn't y you you'd you'll you're you've your yours yourself yourselves
""".split())


class TransportError(Exception):
    """The server could not be reached or did not answer HTTP."""


class Fatal(Exception):
    """The run cannot go on (a refused ingest, a broken dataset)."""


# ---------------------------------------------------------------------------------------------
# HTTP and tokens


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def mint_token(secret: str, sub: str, tenant: str, ttl: int = 3600) -> str:
    """An HS256 JWT with `sub`, `tenant_id`, `iat` and `exp`."""
    now = int(time.time())
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"sub": sub, "tenant_id": tenant, "iat": now, "exp": now + ttl}
    signing_input = (
        b64url(json.dumps(header, separators=(",", ":")).encode())
        + "."
        + b64url(json.dumps(claims, separators=(",", ":")).encode())
    )
    sig = hmac.new(secret.encode(), signing_input.encode("ascii"), hashlib.sha256).digest()
    return signing_input + "." + b64url(sig)


class Client:
    def __init__(self, base_url: str, timeout: float = 60.0):
        self.base = base_url.rstrip("/")
        self.timeout = timeout

    def request(self, method, path, body=None, token=None):
        """Returns (status, parsed JSON body or text). Raises TransportError when no HTTP answer."""
        data = None
        headers = {"Accept": "application/json, application/problem+json, text/plain"}
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = "Bearer " + token
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, raw, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            status, raw, ctype = err.code, err.read(), err.headers.get("Content-Type", "")
        except (urllib.error.URLError, OSError) as err:
            raise TransportError(f"{method} {self.base}{path}: {getattr(err, 'reason', err)}")
        text = raw.decode("utf-8", errors="replace")
        if "json" in ctype:
            try:
                return status, json.loads(text)
            except ValueError:
                pass
        return status, text


def problem_text(status, body) -> str:
    """One line out of an RFC 9457 problem (or whatever the body was)."""
    if isinstance(body, dict):
        detail = body.get("detail") or body.get("title") or json.dumps(body)
        field = body.get("field")
        return f"{status} {detail}" + (f" (field `{field}`)" if field else "")
    return f"{status} {str(body).strip()[:300]}"


def rejects_mode_field(body) -> bool:
    """A 422 that is about the `mode` field (unknown field, or a value the server refuses)."""
    if not isinstance(body, dict):
        return False
    return body.get("field") == "mode" or "`mode`" in str(body.get("detail", ""))


# ---------------------------------------------------------------------------------------------
# Dataset


def load_dataset(folder: Path, limit):
    files = sorted(folder.glob("*.json"))
    if not files:
        raise Fatal(f"no *.json files in {folder}")
    convs = []
    for path in files:
        try:
            conv = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise Fatal(f"{path}: {err}")
        turn_ids = set()
        for session in conv["sessions"]:
            for turn in session["turns"]:
                if turn["id"] in turn_ids:
                    raise Fatal(f"{path}: duplicate turn id {turn['id']}")
                if not KEY_RE.match(turn["id"]):
                    raise Fatal(f"{path}: turn id {turn['id']!r} is not a valid memory key")
                turn_ids.add(turn["id"])
        for q in conv["questions"]:
            missing = [e for e in q["evidence"] if e not in turn_ids]
            if missing or not q["evidence"]:
                raise Fatal(f"{path}: question {q['id']} has unknown evidence {missing}")
        convs.append(conv)
    return convs[:limit] if limit else convs


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]

def stamped(date, speaker, text, stamp="iso"):
    """A turn as a stored memory: its session's date (ISO `2024-03-02`, written in the form
    `stamp` (`--stamp`) names) and its speaker, then the text."""
    y, m, d = (int(x) for x in date.split("-"))
    if stamp == "long":
        return f"[7:30 pm on {d} {MONTHS[m - 1]}, {y}] {speaker}: {text}"
    if stamp == "prose":
        return f"On {d} {MONTHS[m - 1]} {y}, {speaker} said: {text}"
    return f"{date} {speaker}: {text}"


def documents(conv, stamp="iso", sessions=None):
    """(memory key, stored content, metadata) for every turn (of `sessions` only, when given),
    in dialogue order."""
    docs = []
    for session in conv["sessions"] if sessions is None else sessions:
        for turn in session["turns"]:
            content = stamped(session["date"], turn["speaker"], turn["text"], stamp)
            meta = {"conversation": conv["id"], "session": session["id"], "turn": turn["id"]}
            docs.append((turn["id"], content, meta))
    return docs


def message_documents(conv, named=False, sessions=None):
    """(message id, stored text, metadata) for every turn (of `sessions` only, when given) as a
    chat message: the text as said, with no date (a chat's messages carry it as their time),
    and with its speaker's name only when `named`."""
    return [(turn["id"], f"{turn['speaker']}: {turn['text']}" if named else turn["text"],
             {"session": session["id"]})
            for session in (conv["sessions"] if sessions is None else sessions)
            for turn in session["turns"]]


def mixed_sessions(conv):
    """With --mixed: which of `conv`'s sessions are stored as detail memories (the first, third,
    ...) and which are archived as chat messages (the second, fourth, ...)."""
    as_memories = [s for i, s in enumerate(conv["sessions"]) if i % 2 == 0]
    as_messages = [s for i, s in enumerate(conv["sessions"]) if i % 2 == 1]
    return as_memories, as_messages


def renamed(other, conv):
    """`other` as a distractor for `conv`: its two speakers renamed to `conv`'s (in the turns'
    speakers and texts), its turn ids prefixed `x:<conv>:`."""
    names = dict(zip(other["speakers"], conv["speakers"]))
    pattern = re.compile(r"\b(%s)\b" % "|".join(re.escape(n) for n in names))

    def rename(text):
        return pattern.sub(lambda m: names[m.group(1)], text)

    return dict(
        other,
        id=f"x-{conv['id']}-{other['id']}",
        speakers=[names.get(n, n) for n in other["speakers"]],
        sessions=[dict(session, turns=[dict(turn, id=f"x:{conv['id']}:{turn['id']}",
                                            speaker=rename(turn["speaker"]),
                                            text=rename(turn["text"]))
                                       for turn in session["turns"]])
                  for session in other["sessions"]],
    )


def mixed_conversations(conv, convs, distractors):
    """With --mixed: `conv`, and with `distractors` the others renamed to its speakers."""
    return [conv] + ([renamed(o, conv) for o in convs if o is not conv] if distractors else [])


def mixed_documents(conv, stamp="iso"):
    """With --mixed: every turn as stored, as a memory or as a named message, in dialogue
    order."""
    as_memories, _ = mixed_sessions(conv)
    memory_ids = {s["id"] for s in as_memories}
    return [d for session in conv["sessions"]
            for d in (documents(conv, stamp, [session]) if session["id"] in memory_ids
                      else message_documents(conv, True, [session]))]


def ingest_messages(client, conv, token, named=False, sessions=None):
    """Archives each session of `conv` (or only `sessions`) as a chat session of its own: the
    first speaker's turns from the user, the other's from the AI, a minute apart from noon of
    the session's date; with `named`, each text opens with its speaker's name
    (`<Speaker>: <text>`)."""
    first = conv["speakers"][0]
    count = 0
    for session in conv["sessions"] if sessions is None else sessions:
        batch = []
        for i, turn in enumerate(session["turns"]):
            when = f"{session['date']}T{12 + i // 60:02d}:{i % 60:02d}:00Z"
            text = f"{turn['speaker']}: {turn['text']}" if named else turn["text"]
            batch.append({"id": turn["id"], "text": text, "timestamp": when,
                          "sender": "user" if turn["speaker"] == first else "ai"})
        body = {"session_id": f"{conv['id']}-{session['id']}", "messages_batch": batch}
        status, resp = client.request("POST", "/api/chat/session/archive_messages", body, token)
        if status not in (200, 201):
            raise Fatal(f"archiving {conv['id']} {session['id']} failed: "
                        f"{problem_text(status, resp)}")
        count += len(batch)
    return count


def later_documents(conv, convs, count, stamp="iso"):
    """`count` turns stored after `conv`'s own (and its distractors): the other conversations'
    turns, speakers renamed to `conv`'s, cycled as often as needed under fresh keys. A history
    longer than the server's keyword sample, in which the answers are the oldest turns."""
    return filler_documents(conv, convs, count, stamp, "h", "later")


def earlier_documents(conv, convs, count, stamp="iso"):
    """`count` turns stored before `conv`'s own, made as [`later_documents`]' are: with both, the
    answers sit inside a long history rather than at one end of it."""
    return filler_documents(conv, convs, count, stamp, "e", "earlier")


def filler_documents(conv, convs, count, stamp, prefix, flag):
    """`count` of the other conversations' turns renamed to `conv`'s speakers, cycled under keys
    of `prefix` and the cycle's number, each marked with `flag`."""
    others = distractor_documents(conv, convs, stamp)
    if not others:
        return []
    docs = []
    for i in range(count):
        key, content, meta = others[i % len(others)]
        docs.append((f"{prefix}{i // len(others)}:{key}", content, dict(meta, **{flag: True})))
    return docs


def distractor_documents(conv, convs, stamp="iso"):
    """The other conversations' turns with their two speakers renamed to `conv`'s, in dialogue
    order: same-speaker small talk on other topics, for a haystack six times larger."""
    return [(key, content, dict(meta, distractor_for=conv["id"]))
            for other in convs if other is not conv
            for key, content, meta in documents(renamed(other, conv), stamp)]


# ---------------------------------------------------------------------------------------------
# BM25 baseline


def tokens(text: str):
    return [w for w in WORD_RE.findall(text.lower()) if w not in STOPWORDS]


class BM25:
    def __init__(self, docs, k1=1.2, b=0.75):
        self.keys = [key for key, _, _ in docs]
        self.tfs = [collections.Counter(tokens(content)) for _, content, _ in docs]
        self.lens = [sum(tf.values()) for tf in self.tfs]
        self.avgdl = (sum(self.lens) / len(self.lens)) if self.lens else 0.0
        self.k1, self.b = k1, b
        df = collections.Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(self.tfs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def search(self, query: str, limit: int):
        terms = tokens(query)
        scored = []
        for i, tf in enumerate(self.tfs):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lens[i] / self.avgdl)
            for w in terms:
                f = tf.get(w)
                if f:
                    score += self.idf[w] * f * (self.k1 + 1) / (f + norm)
            if score > 0:
                scored.append((-score, i))
        scored.sort()
        return [self.keys[i] for _, i in scored[:limit]]


# ---------------------------------------------------------------------------------------------
# Metrics


class Scores:
    """Per-method accumulator of per-question rankings."""

    def __init__(self, ks):
        self.ks = ks
        self.rows = []  # one dict per question
        self.latencies = []
        self.duplicate_lists = 0
        self.duplicate_hits = 0
        self.errors = 0

    def add(self, question, keys, latency=None):
        if latency is not None:
            self.latencies.append(latency)
        counts = collections.Counter(keys)
        dups = sum(c - 1 for c in counts.values() if c > 1)
        if dups:
            self.duplicate_lists += 1
            self.duplicate_hits += dups
        evidence = question["evidence"]
        ranks = {}
        for e in evidence:
            ranks[e] = keys.index(e) + 1 if e in keys else None
        found = [r for r in ranks.values() if r is not None]
        first = min(found) if found else None
        self.rows.append({
            "id": question["id"],
            "category": question["category"],
            "ranks": ranks,
            "recall": {k: sum(1 for r in found if r <= k) / len(evidence) for k in self.ks},
            "rr": (1.0 / first) if first is not None else 0.0,
            "top": keys,
        })

    def summary(self):
        n = len(self.rows)
        if n == 0:
            return None
        out = {f"recall@{k}": sum(r["recall"][k] for r in self.rows) / n for k in self.ks}
        out["mrr"] = sum(r["rr"] for r in self.rows) / n
        kmax = max(self.ks)
        cats = collections.defaultdict(list)
        for r in self.rows:
            cats[r["category"]].append(r["recall"][kmax])
        out[f"by_category_recall@{kmax}"] = {c: sum(v) / len(v) for c, v in sorted(cats.items())}
        out["questions"] = n
        out["duplicate_hit_lists"] = self.duplicate_lists
        out["duplicate_hits"] = self.duplicate_hits
        out["errors"] = self.errors
        if self.latencies:
            lat = sorted(self.latencies)
            out["latency_ms_mean"] = 1000 * statistics.fmean(lat)
            out["latency_ms_p95"] = 1000 * lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        return out


# ---------------------------------------------------------------------------------------------
# The run


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def ingest(client, docs, token):
    for key, content, meta in docs:
        body = {"content": content, "memory_type": "conversation_turn", "metadata": meta}
        status, resp = client.request(
            "PUT", "/api/memories/" + urllib.parse.quote(key, safe=":._-"), body, token
        )
        if status not in (200, 201):
            raise Fatal(f"storing {key} failed: {problem_text(status, resp)}")
    return docs


def read_backlog(client):
    """The embedding backlog gauge, or None when /metrics does not expose it."""
    status, body = client.request("GET", "/metrics")
    if status != 200 or not isinstance(body, str):
        return None
    found = BACKLOG_RE.findall(body)
    if not found:
        return None
    return sum(float(v) for v in found)


def wait_for_embeddings(client, timeout=1200.0):
    start = time.monotonic()
    backlog = read_backlog(client)
    if backlog is None:
        log("metrics: no mnemo_embedding_backlog gauge; not waiting for the indexer")
        return {"waited_s": 0.0, "gauge": False}
    last = None
    while backlog > 0:
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            log(f"embedding backlog still {backlog:g} after {timeout:.0f} s; searching anyway")
            return {"waited_s": elapsed, "gauge": True, "timed_out": True, "backlog": backlog}
        if last is None or time.monotonic() - last >= 5:
            log(f"waiting for the indexer: backlog {backlog:g} ({elapsed:.0f} s)")
            last = time.monotonic()
        time.sleep(0.5)
        backlog = read_backlog(client) or 0
    waited = time.monotonic() - start
    log(f"embedding backlog is 0 (waited {waited:.1f} s)")
    return {"waited_s": waited, "gauge": True, "timed_out": False}


def run_mode(client, mode, convs, tokens_by_conv, limit, ks, notes, route="/api/memories/search"):
    """Scores one search mode over every question; returns (Scores or None, note)."""
    scores = Scores(ks)
    id_field = "message_id" if route == "/api/chat/search" else "memory_key"
    # A recall hit is a memory or a message; each is keyed by its turn's id.
    hit_id = ((lambda h: h.get("memory_key") or h.get("message_id")) if route == "/api/recall"
              else (lambda h: h.get(id_field)))
    send_mode = True
    for conv in convs:
        token = tokens_by_conv[conv["id"]]
        for q in conv["questions"]:
            body = {"query": q["question"], "limit": limit}
            if send_mode:
                body["mode"] = mode
            t0 = time.perf_counter()
            status, resp = client.request("POST", route, body, token)
            latency = time.perf_counter() - t0
            if status == 422 and send_mode:
                if mode == "keyword" and rejects_mode_field(resp):
                    notes.append(
                        f"keyword: the server refused the `mode` field "
                        f"({problem_text(status, resp)}); searched without `mode`"
                    )
                    log(notes[-1])
                    send_mode = False
                    body.pop("mode")
                    t0 = time.perf_counter()
                    status, resp = client.request("POST", route, body, token)
                    latency = time.perf_counter() - t0
                else:
                    return None, problem_text(status, resp)
            if status != 200 or not isinstance(resp, dict):
                scores.errors += 1
                log(f"{mode}: search for {q['id']} failed: {problem_text(status, resp)}")
                scores.add(q, [], None)
                continue
            keys = [hit_id(h) for h in resp.get("hits", [])][:limit]
            scores.add(q, keys, latency)
    return scores, None


def fmt(x):
    return f"{x:.3f}"


def print_report(results, ks, categories, timing, notes):
    kmax = max(ks)
    cols = [f"recall@{k}" for k in ks] + ["MRR"]
    print()
    print("| method | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, res in results.items():
        if res.get("summary") is None:
            print(f"| {name} | " + " | ".join(["n/a"] * len(cols)) + " |")
        else:
            s = res["summary"]
            vals = [fmt(s[f"recall@{k}"]) for k in ks] + [fmt(s["mrr"])]
            print(f"| {name} | " + " | ".join(vals) + " |")
    print()
    print(f"Recall@{kmax} by category:")
    print()
    print("| method | " + " | ".join(f"{c} ({n})" for c, n in categories) + " |")
    print("|---" * (len(categories) + 1) + "|")
    for name, res in results.items():
        s = res.get("summary")
        if s is None:
            print(f"| {name} | " + " | ".join(["n/a"] * len(categories)) + " |")
        else:
            by = s[f"by_category_recall@{kmax}"]
            print(f"| {name} | " + " | ".join(fmt(by.get(c, 0.0)) for c, _ in categories) + " |")
    print()
    print("Timing and hygiene:")
    print()
    if "ingest_s" in timing:
        print(f"- ingest: {timing['ingest_turns']} turns in {timing['ingest_s']:.1f} s "
              f"({1000 * timing['ingest_s'] / max(1, timing['ingest_turns']):.1f} ms per turn)")
    wait = timing.get("embedding_wait")
    if wait and wait.get("gauge"):
        extra = " (timed out)" if wait.get("timed_out") else ""
        print(f"- waited {wait['waited_s']:.1f} s for the embedding backlog to reach 0{extra}")
    elif wait:
        print("- /metrics has no mnemo_embedding_backlog gauge: did not wait for the indexer")
    for name, res in results.items():
        s = res.get("summary")
        if s is None:
            print(f"- {name}: n/a: {res.get('unavailable')}")
            continue
        parts = []
        if "latency_ms_mean" in s:
            parts.append(f"mean search latency {s['latency_ms_mean']:.1f} ms "
                         f"(p95 {s['latency_ms_p95']:.1f} ms)")
        parts.append(f"{s['duplicate_hits']} duplicate hits in {s['duplicate_hit_lists']} lists")
        if s["errors"]:
            parts.append(f"{s['errors']} failed searches")
        print(f"- {name}: " + ", ".join(parts))
    for note in notes:
        print(f"- note: {note}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("MNEMO_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--token", help="one token for every conversation instead of a user minted per "
                    "conversation from MNEMO_JWT_SECRET; then every search also sees the other "
                    "conversations' turns (and earlier runs'), unlike the BM25 baseline")
    ap.add_argument("--modes", default="keyword,semantic,hybrid")
    ap.add_argument("--k", default="5,10", help="recall cut-offs, comma-separated; searches ask "
                    "for max(10, largest k) hits, which is also the MRR cut-off")
    ap.add_argument("--dataset", action="append",
                    help="a folder of conversations (default eval/dataset); given twice or more, "
                    "the folders' conversations are measured together")
    ap.add_argument("--out", help="write the full results (per question) to this JSON file")
    ap.add_argument("--limit-conversations", type=int, default=0, metavar="N",
                    help="only the first N conversations (a quick run)")
    ap.add_argument("--tenant", default="eval")
    ap.add_argument("--bm25-only", action="store_true", help="no server: only the baseline")
    ap.add_argument("--distractors", action="store_true",
                    help="hard mode: each conversation's user also stores every other "
                    "conversation's turns, speakers renamed to its own (a haystack 6x larger)")
    ap.add_argument("--history", type=int, default=0, metavar="N",
                    help="long-history mode: each conversation's user then stores N more turns "
                    "(the other conversations', renamed, cycled), so that the answers are old "
                    "and the history exceeds what a keyword search ranks exactly")
    ap.add_argument("--earlier", type=int, default=0, metavar="N",
                    help="with or without --history: each conversation's user first stores N "
                    "turns made the same way, so that the answers sit inside a long history "
                    "(with --history, at that depth from its newest turn)")
    ap.add_argument("--one-user", action="store_true",
                    help="shared-haystack mode: one user stores every conversation's turns as "
                    "written (speakers keep their names), and every question searches all of "
                    "them; the BM25 baseline indexes all of them too")
    ap.add_argument("--as-messages", action="store_true",
                    help="chat mode: each conversation's sessions are archived as chat sessions "
                    "(first speaker as the user, the other as the AI, the text as said) and "
                    "each question goes to POST /api/chat/search; the BM25 baseline ranks the "
                    "same texts")
    ap.add_argument("--named", action="store_true",
                    help="with --as-messages: each message's text opens with its speaker's name, "
                    "as a group chat's would (a chat with an assistant has no such names)")
    ap.add_argument("--mixed", action="store_true",
                    help="recall mode: each conversation's odd sessions are stored as detail "
                    "memories (as by default) and its even ones archived as chat messages "
                    "opening with their speaker's name (as with --as-messages --named); each "
                    "question goes to POST /api/recall, which ranks both kinds in one list; "
                    "--distractors adds the other conversations, renamed, stored the same way")
    ap.add_argument("--stamp", choices=["iso", "long", "prose"], default="iso",
                    help="how a stored memory gives its session's date and speaker: iso "
                    "'2024-03-02 Maya: ...' (default), long '[7:30 pm on 2 March, 2024] Maya: "
                    "...', prose 'On 2 March 2024, Maya said: ...'")
    ap.add_argument("--run-id", metavar="ID",
                    help="name the users eval-<ID>-<conversation> instead of a fresh run id, so "
                    "that a later run can search what this one stored (see --skip-ingest)")
    ap.add_argument("--skip-ingest", action="store_true",
                    help="store nothing: search the turns an earlier run with the same --run-id, "
                    "dataset and options stored (to measure another build's ranking on the same "
                    "database without waiting for the embedder again)")
    args = ap.parse_args(argv)
    if args.stamp != "iso" and args.as_messages:
        ap.error("--stamp is for stored memories (messages carry their time apart)")
    if args.skip_ingest and not args.run_id:
        ap.error("--skip-ingest needs the --run-id of the run that stored the turns")
    if args.history < 0 or args.earlier < 0:
        ap.error("--history and --earlier must be 0 or more")
    if args.as_messages and (args.distractors or args.history or args.earlier or args.one_user):
        ap.error("--as-messages takes no --distractors, --history, --earlier or --one-user")
    if args.mixed and (args.as_messages or args.history or args.earlier or args.one_user):
        ap.error("--mixed takes no --as-messages, --history, --earlier or --one-user")
    if args.named and not args.as_messages:
        ap.error("--named is for --as-messages (stored memories always name their speaker)")
    if args.one_user and (args.distractors or args.history or args.earlier or args.token):
        ap.error("--one-user already puts every conversation in one haystack: it takes no "
                 "--distractors, --history, --earlier or --token")

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    if not ks or ks[0] < 1 or ks[-1] > 100:
        ap.error("--k values must be between 1 and 100")
    limit = max(10, ks[-1])

    try:
        folders = args.dataset or [str(Path(__file__).resolve().parent / "dataset")]
        convs = [c for f in folders for c in load_dataset(Path(f), 0)]
        if len({c["id"] for c in convs}) != len(convs):
            raise Fatal("the datasets share a conversation id")
        if args.limit_conversations:
            convs = convs[:args.limit_conversations]
    except Fatal as err:
        log(f"eval: {err}")
        return 1
    n_questions = sum(len(c["questions"]) for c in convs)
    if args.as_messages:
        docs_by_conv = {c["id"]: message_documents(c, args.named) for c in convs}
    elif args.mixed:
        docs_by_conv = {
            c["id"]: [d for m in mixed_conversations(c, convs, args.distractors)
                      for d in mixed_documents(m, args.stamp)]
            for c in convs
        }
    else:
        docs_by_conv = {
            c["id"]: earlier_documents(c, convs, args.earlier, args.stamp)
            + documents(c, args.stamp)
            + (distractor_documents(c, convs, args.stamp) if args.distractors else [])
            + later_documents(c, convs, args.history, args.stamp)
            for c in convs
        }
    n_turns = sum(len(d) for d in docs_by_conv.values())
    log(f"dataset: {len(convs)} conversations, {n_turns} turns, {n_questions} questions")
    cat_counts = collections.Counter(q["category"] for c in convs for q in c["questions"])
    categories = sorted(cat_counts.items())

    results = {}
    notes = []
    timing = {}

    bm25 = Scores(ks)
    shared = BM25([d for c in convs for d in docs_by_conv[c["id"]]]) if args.one_user else None
    for conv in convs:
        index = shared or BM25(docs_by_conv[conv["id"]])
        for q in conv["questions"]:
            bm25.add(q, index.search(q["question"], limit))
    results["bm25 (baseline)"] = {"summary": bm25.summary(), "questions": bm25.rows}

    if not args.bm25_only:
        secret = os.environ.get("MNEMO_JWT_SECRET")
        if not args.token and not secret:
            log("eval: set MNEMO_JWT_SECRET (tokens are minted per conversation) or pass --token")
            return 1
        client = Client(args.url)
        run_id = args.run_id or time.strftime("%Y%m%d%H%M%S") + "-" + secrets.token_hex(3)
        tokens_by_conv = {}
        users = {}
        try:
            t0 = time.perf_counter()
            for i, conv in enumerate(convs):
                user = f"eval-{run_id}-" + ("all" if args.one_user else conv["id"])
                users[conv["id"]] = user
                token = args.token or mint_token(secret, user, args.tenant)
                tokens_by_conv[conv["id"]] = token
                if args.skip_ingest and args.one_user and i > 0:
                    continue
                if args.skip_ingest:
                    probe = "/api/chat/sessions?limit=1" if args.as_messages \
                        else "/api/memories?limit=1"
                    status, body = client.request("GET", probe, None, token)
                    if status != 200 or not isinstance(body, dict) or not body.get("items"):
                        raise Fatal(f"--skip-ingest: nothing stored for {user} (is --run-id "
                                    f"{run_id} the run that stored it, on this database?)")
                    continue
                c0 = time.perf_counter()
                if args.as_messages:
                    stored = ingest_messages(client, conv, token, args.named)
                elif args.mixed:
                    stored = 0
                    for c in mixed_conversations(conv, convs, args.distractors):
                        as_memories, as_messages = mixed_sessions(c)
                        stored += len(ingest(client, documents(c, args.stamp, as_memories),
                                             token))
                        stored += ingest_messages(client, c, token, True, as_messages)
                else:
                    stored = len(ingest(client, docs_by_conv[conv["id"]], token))
                log(f"ingested {conv['id']}: {stored} turns in {time.perf_counter() - c0:.1f} s")
            if not args.skip_ingest:
                timing["ingest_s"] = time.perf_counter() - t0
                timing["ingest_turns"] = n_turns

            for mode in modes:
                if mode in SEMANTIC_MODES and "embedding_wait" not in timing:
                    timing["embedding_wait"] = wait_for_embeddings(client)
                route = ("/api/chat/search" if args.as_messages
                         else "/api/recall" if args.mixed else "/api/memories/search")
                scores, unavailable = run_mode(client, mode, convs, tokens_by_conv, limit, ks,
                                               notes, route)
                name = f"mnemo {mode}"
                if scores is None:
                    log(f"{mode}: n/a: {unavailable}")
                    results[name] = {"summary": None, "unavailable": unavailable}
                else:
                    results[name] = {"summary": scores.summary(), "questions": scores.rows}
            # The server ignoring `mode` would make modes return the same lists: say so.
            tops = {name: [r["top"] for r in res["questions"]]
                    for name, res in results.items()
                    if name.startswith("mnemo ") and res.get("summary") is not None}
            names = list(tops)
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    if tops[a] == tops[b]:
                        notes.append(f"{a} and {b} returned identical hit lists for every "
                                     f"question (is `mode` ignored?)")
        except TransportError as err:
            log(f"eval: cannot reach mnemo: {err}")
            return 2
        except Fatal as err:
            log(f"eval: {err}")
            return 1
        timing["users"] = users
        timing["run_id"] = run_id

    print(f"mnemo retrieval eval: {len(convs)} conversations, {n_turns} stored turns"
          + (" (with distractors)" if args.distractors else "")
          + (" (all in one user)" if args.one_user else "")
          + (" (as chat messages" + (", named" if args.named else "") + ")"
             if args.as_messages else "")
          + (" (memories and chat messages, by /api/recall)" if args.mixed else "")
          + (f" (after {args.earlier} earlier turns each)" if args.earlier else "")
          + (f" (and {args.history} later turns each)" if args.history else "") + ", "
          f"{n_questions} questions" + ("" if args.bm25_only else f", server {args.url}"))
    print_report(results, ks, categories, timing, notes)

    if args.out:
        payload = {
            "dataset": {"conversations": len(convs), "turns": n_turns,
                        "questions": n_questions, "categories": dict(cat_counts)},
            "k": ks,
            "modes": modes,
            "timing": timing,
            "notes": notes,
            "results": results,
        }
        Path(args.out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        log(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
