"""`sqlite:///path` — the embedded, durable default store: stdlib `sqlite3` in WAL mode behind async methods.

URLs accepted (the query string is ignored):

* `sqlite:///abs/path.db` and `sqlite:////abs/path.db` — an absolute path (extra leading slashes collapse to one, so
  `default_url()`'s `sqlite:///` + absolute path works);
* `sqlite://rel/path.db` or `sqlite:rel/path.db` — relative to the working directory; `~` is expanded.

Missing parent directories are created. `:memory:` is refused (each thread would see its own empty database).

Concurrency: every blocking call runs in `asyncio.to_thread` on a connection owned by that worker thread (WAL lets
readers run beside the one writer). Several processes may share the file: `busy_timeout` makes them wait for the write
lock instead of failing, and every write is one `BEGIN IMMEDIATE` transaction, so a compare-and-set takes the write lock
before it reads the status it compares. Every write commits before its method returns; with `synchronous=NORMAL` in WAL
mode a commit survives a crash of the process, though the last commits may be lost if the machine loses power.
WAL checkpoints (the copy into the main file, and its fsync) run on a thread of their own every second, so no request
pays for one (SQLite's automatic checkpoint stays on as a backstop at a large threshold).

Cross-process signals are polled: `read_events(wait>0)` re-reads the (indexed) events table every 25 ms, and
`cancel_requests()` polls a small `cancels` table every 100 ms (rows older than a minute are pruned), with an in-process
fast path so a cancel published by this same store object arrives at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .base import (
    DEFAULT_TTL, HEARTBEAT_TTL, ORPHAN_ERROR, UNFINISHED, Json, Page, ResponseRecord, ResponseStore, orphan_event,
    output_scope, owner_alive,
)

T = TypeVar("T")

EVENT_POLL_S = 0.025
CANCEL_POLL_S = 0.1
CANCEL_KEEP_S = 60.0
BUSY_TIMEOUT_MS = 30_000
CHECKPOINT_EVERY_S = 1.0
# A backstop only: the checkpointer thread keeps the WAL far below this; without it (another process's store, a
# stalled thread) the WAL still stays bounded.
AUTOCHECKPOINT_PAGES = 20_000
MAX_CHAIN = 10_000  # a guard against a (corrupt) cycle of previous_response_id

_UNFINISHED_SQL = "('queued', 'in_progress')"
assert UNFINISHED == ("queued", "in_progress")  # the SQL literal above must follow base.UNFINISHED

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    response TEXT NOT NULL,
    request TEXT NOT NULL,
    status TEXT NOT NULL,
    previous_response_id TEXT,
    conversation_id TEXT,
    owner TEXT,
    created_at INTEGER NOT NULL,
    expires_at REAL
);
CREATE INDEX IF NOT EXISTS responses_expiry ON responses(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS responses_unfinished ON responses(status) WHERE status IN {_UNFINISHED_SQL};
CREATE TABLE IF NOT EXISTS items (
    scope TEXT NOT NULL,
    item_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (scope, item_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS items_order ON items(scope, position);
CREATE INDEX IF NOT EXISTS items_by_id ON items(item_id);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (response_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS heartbeats (owner TEXT PRIMARY KEY, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cancels (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    response_id TEXT NOT NULL,
    created_at REAL NOT NULL
);
"""

_COLUMNS = "id, response, request, previous_response_id, conversation_id, owner, created_at, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def path_from_url(url: str) -> Path:
    """The database file named by a `sqlite:` URL (see the module docstring)."""
    from ..errors import ConfigurationError

    rest = url.split(":", 1)[1] if ":" in url else url
    rest = urlsplit(rest).path if "?" in rest or "#" in rest else rest
    if rest.startswith("//"):
        rest = rest[2:]  # the empty authority of sqlite://
    if rest.startswith("/"):
        rest = "/" + rest.lstrip("/")
    if not rest or ":memory:" in rest:
        raise ConfigurationError(f"Response store URL {url!r} names no database file; use e.g. "
                                 "sqlite:///var/lib/responses.db (for a throwaway store, memory://).")
    return Path(rest).expanduser()


def _record(row: Sequence[Any]) -> ResponseRecord:
    return ResponseRecord(id=row[0], response=json.loads(row[1]), request=json.loads(row[2]),
                          previous_response_id=row[3], conversation_id=row[4], owner=row[5], created_at=row[6],
                          expires_at=row[7])


class SqliteStore(ResponseStore):
    schemes = ("sqlite",)
    shared = True  # several processes on one host may share the file (signals are polled)

    def __init__(self, url: str, *, ttl: float | None = DEFAULT_TTL) -> None:
        super().__init__(url, ttl=ttl)
        self.path = path_from_url(url)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._cancel_queues: list[asyncio.Queue[tuple[int, str]]] = []
        self._closed = False
        self._stop = threading.Event()
        self._checkpointer: threading.Thread | None = None

    # ---- connections ----

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (sqlite3 connections must not be used by two threads at once)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise RuntimeError("the response store is closed")
            # isolation_level=None: we open transactions ourselves (BEGIN IMMEDIATE for writes).
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA synchronous=NORMAL")
            # SQLite's own checkpoint runs inside whichever commit crosses the threshold: a 20–30 ms stall (the
            # fsync) on one request in ~80 at 100k rows. Our checkpointer thread does it off the request path.
            conn.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn()
        conn.execute("BEGIN")  # one snapshot for multi-statement reads
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn()
        # IMMEDIATE takes the write lock first (waiting out busy_timeout), so what fn reads cannot change under it.
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            # A failed COMMIT (disk full, I/O error) leaves the transaction open and the write lock held.
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return result

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    async def start(self) -> None:
        def setup() -> None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._conn()
            conn.execute("PRAGMA journal_mode=WAL")  # persistent in the file: every later connection uses it
            # IF NOT EXISTS under the write lock: several processes may start at once.
            self._write(lambda c: [c.execute(statement) for statement in SCHEMA.split(";") if statement.strip()])

        await self._run(setup)
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="sqlite-store-checkpoint",
                                              daemon=True)
        self._checkpointer.start()

    def _checkpoint_loop(self) -> None:
        """Copy the WAL into the database every second. PASSIVE never waits for (nor blocks) readers and writers; in a
        busy moment it copies what it can and the next round does the rest."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
        try:
            while not self._stop.wait(CHECKPOINT_EVERY_S):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.OperationalError:
                    pass  # another process is checkpointing: its work is ours
        finally:
            conn.close()

    async def close(self) -> None:
        self._closed = True
        self._stop.set()
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.join)
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    # ---- responses ----

    def _write_scope(self, conn: sqlite3.Connection, scope: str, items: Sequence[Json]) -> None:
        conn.execute("DELETE FROM items WHERE scope = ?", (scope,))
        conn.executemany("INSERT OR REPLACE INTO items (scope, item_id, position, data) VALUES (?, ?, ?, ?)",
                         [(scope, item["id"], n, _dumps(item)) for n, item in enumerate(items)])

    def _write_output(self, conn: sqlite3.Connection, response_id: str, response: Json) -> None:
        if response.get("status") not in UNFINISHED:
            self._write_scope(conn, output_scope(response_id),
                              [i for i in response.get("output") or [] if "id" in i])

    async def put_response(self, record: ResponseRecord, input_items: Sequence[Json] | None = None) -> None:
        if record.expires_at is None and self.ttl is not None:
            record.expires_at = self.expiry()
        row = (record.id, _dumps(record.response), _dumps(record.request), record.status,
               record.previous_response_id, record.conversation_id, record.owner, record.created_at, record.expires_at)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO responses (id, response, request, status, previous_response_id, "
                         "conversation_id, owner, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
            if input_items is not None:
                self._write_scope(conn, record.id, input_items)
            self._write_output(conn, record.id, record.response)

        await self._run(self._write, write)

    async def get_response(self, response_id: str) -> ResponseRecord | None:
        def read() -> ResponseRecord | None:
            row = self._conn().execute(f"SELECT {_COLUMNS} FROM responses WHERE id = ? AND {_LIVE}",
                                       (response_id, time.time())).fetchone()
            return _record(row) if row is not None else None

        return await self._run(read)

    async def update_response(self, response_id: str, response: Json, *,
                              only_if_status: Sequence[str] | None = None, owner: str | None = None) -> bool:
        text, status = _dumps(response), str(response.get("status"))

        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute(f"SELECT status FROM responses WHERE id = ? AND {_LIVE}",
                               (response_id, time.time())).fetchone()
            if row is None or (only_if_status is not None and row[0] not in only_if_status):
                return False
            conn.execute("UPDATE responses SET response = ?, status = ?, owner = ? WHERE id = ?",
                         (text, status, owner, response_id))
            self._write_output(conn, response_id, response)
            return True

        return await self._run(self._write, write)

    def _drop(self, conn: sqlite3.Connection, response_id: str) -> None:
        conn.execute("DELETE FROM items WHERE scope IN (?, ?)", (response_id, output_scope(response_id)))
        conn.execute("DELETE FROM events WHERE response_id = ?", (response_id,))
        conn.execute("DELETE FROM responses WHERE id = ?", (response_id,))

    async def delete_response(self, response_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            live = conn.execute(f"SELECT 1 FROM responses WHERE id = ? AND {_LIVE}",
                                (response_id, time.time())).fetchone()
            self._drop(conn, response_id)  # an expired one goes too, but reads as missing
            return live is not None

        return await self._run(self._write, write)

    async def chain(self, response_id: str) -> list[ResponseRecord]:
        # One recursive query: walk previous_response_id up from `response_id`, stopping at a missing or expired
        # ancestor (the join finds no row); depth orders the result oldest first and bounds a corrupt cycle.
        query = f"""
            WITH RECURSIVE walk({_COLUMNS}, depth) AS (
                SELECT {_COLUMNS}, 0 FROM responses WHERE id = ? AND {_LIVE}
                UNION ALL
                SELECT {', '.join('r.' + c.strip() for c in _COLUMNS.split(','))}, walk.depth + 1
                FROM responses AS r JOIN walk ON r.id = walk.previous_response_id
                WHERE (r.expires_at IS NULL OR r.expires_at > ?) AND walk.depth < ?
            )
            SELECT {_COLUMNS} FROM walk ORDER BY depth DESC"""

        def read() -> list[ResponseRecord]:
            now = time.time()
            rows = self._conn().execute(query, (response_id, now, now, MAX_CHAIN)).fetchall()
            return [_record(row) for row in rows]

        return await self._run(read)

    # ---- items ----

    def _append(self, conn: sqlite3.Connection, scope: str, items: Sequence[Json]) -> None:
        (last,) = conn.execute("SELECT COALESCE(MAX(position), -1) FROM items WHERE scope = ?", (scope,)).fetchone()
        # An id already in the scope keeps its place and takes the new data (as a dict assignment would).
        conn.executemany("INSERT INTO items (scope, item_id, position, data) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (scope, item_id) DO UPDATE SET data = excluded.data",
                         [(scope, item["id"], last + 1 + n, _dumps(item)) for n, item in enumerate(items)])

    async def add_items(self, scope: str, items: Sequence[Json]) -> None:
        if items:
            await self._run(self._write, lambda conn: self._append(conn, scope, items))

    async def list_items(self, scope: str, *, limit: int = 20, order: str = "desc", after: str | None = None) -> Page:
        desc = order == "desc"

        def read(conn: sqlite3.Connection) -> Page:
            if after is None:
                rows = conn.execute(f"SELECT data FROM items WHERE scope = ? ORDER BY position "
                                    f"{'DESC' if desc else 'ASC'} LIMIT ?", (scope, limit + 1)).fetchall()
            else:
                found = conn.execute("SELECT position FROM items WHERE scope = ? AND item_id = ?",
                                     (scope, after)).fetchone()
                if found is None:
                    return Page([], False)
                rows = conn.execute(f"SELECT data FROM items WHERE scope = ? AND position {'<' if desc else '>'} ? "
                                    f"ORDER BY position {'DESC' if desc else 'ASC'} LIMIT ?",
                                    (scope, found[0], limit + 1)).fetchall()
            return Page([json.loads(r[0]) for r in rows[:limit]], len(rows) > limit)

        return await self._run(self._read, read)

    async def get_item(self, scope: str, item_id: str) -> Json | None:
        def read() -> Json | None:
            row = self._conn().execute("SELECT data FROM items WHERE scope = ? AND item_id = ?",
                                       (scope, item_id)).fetchone()
            return json.loads(row[0]) if row is not None else None

        return await self._run(read)

    async def find_item(self, item_id: str) -> Json | None:
        # Items of an expired (not yet purged) response read as missing, like the response itself.
        query = """
            SELECT data FROM items AS i WHERE item_id = ? AND NOT EXISTS (
                SELECT 1 FROM responses AS r
                WHERE r.id = CASE WHEN i.scope LIKE '%/output' THEN substr(i.scope, 1, length(i.scope) - 7)
                                  ELSE i.scope END
                  AND r.expires_at <= ?)
            LIMIT 1"""

        def read() -> Json | None:
            row = self._conn().execute(query, (item_id, time.time())).fetchone()
            return json.loads(row[0]) if row is not None else None

        return await self._run(read)

    async def delete_item(self, scope: str, item_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM items WHERE scope = ? AND item_id = ?", (scope, item_id)).rowcount > 0

        return await self._run(self._write, write)

    # ---- events ----

    async def append_events(self, response_id: str, events: Sequence[Json]) -> None:
        rows = [(response_id, e["sequence_number"], _dumps(e)) for e in events]

        def write(conn: sqlite3.Connection) -> None:
            # A deleted response keeps no events: a writer still running after the DELETE adds nothing.
            if conn.execute("SELECT 1 FROM responses WHERE id = ?", (response_id,)).fetchone() is None:
                return
            conn.executemany("INSERT OR REPLACE INTO events (response_id, seq, data) VALUES (?, ?, ?)", rows)

        await self._run(self._write, write)

    def _events_after(self, response_id: str, after: int) -> list[Json]:
        rows = self._conn().execute("SELECT data FROM events WHERE response_id = ? AND seq > ? ORDER BY seq",
                                    (response_id, after)).fetchall()
        return [json.loads(r[0]) for r in rows]

    async def read_events(self, response_id: str, after: int = -1, *, wait: float = 0.0) -> list[Json]:
        deadline = time.monotonic() + wait
        while True:
            # Polled: the writer may be another process, which cannot wake us.
            found = await self._run(self._events_after, response_id, after)
            left = deadline - time.monotonic()
            if found or left <= 0:
                return found
            await asyncio.sleep(min(EVENT_POLL_S, left))

    # ---- cancels and liveness ----

    async def publish_cancel(self, response_id: str) -> None:
        def write(conn: sqlite3.Connection) -> int:
            now = time.time()
            conn.execute("DELETE FROM cancels WHERE created_at < ?", (now - CANCEL_KEEP_S,))
            cursor = conn.execute("INSERT INTO cancels (response_id, created_at) VALUES (?, ?)", (response_id, now))
            return int(cursor.lastrowid or 0)

        row_id = await self._run(self._write, write)
        for queue in self._cancel_queues:  # the in-process fast path; the poll skips rows already delivered
            queue.put_nowait((row_id, response_id))

    async def cancel_requests(self) -> AsyncIterator[str]:  # type: ignore[override]
        queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self._cancel_queues.append(queue)
        try:
            def newest() -> int:
                return int(self._conn().execute("SELECT COALESCE(MAX(id), 0) FROM cancels").fetchone()[0])

            def since(row_id: int) -> list[tuple[int, str]]:
                return self._conn().execute("SELECT id, response_id FROM cancels WHERE id > ? ORDER BY id",
                                            (row_id,)).fetchall()

            seen = await self._run(newest)  # only cancels published from now on
            delivered: set[int] = set()
            while True:
                try:
                    row_id, response_id = await asyncio.wait_for(queue.get(), CANCEL_POLL_S)
                    delivered.add(row_id)
                    yield response_id
                    continue
                except asyncio.TimeoutError:
                    pass
                for row_id, response_id in await self._run(since, seen):
                    seen = max(seen, row_id)
                    if row_id in delivered:
                        delivered.discard(row_id)
                    else:
                        yield response_id
        finally:
            self._cancel_queues.remove(queue)

    async def heartbeat(self, owner: str) -> None:
        expires = time.time() + HEARTBEAT_TTL

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO heartbeats (owner, expires_at) VALUES (?, ?)", (owner, expires))

        await self._run(self._write, write)

    async def fail_orphans(self, error: Json = ORPHAN_ERROR) -> list[str]:
        def scan(conn: sqlite3.Connection) -> tuple[list[tuple[str, str | None]], dict[str, float]]:
            rows = conn.execute(f"SELECT id, owner FROM responses WHERE status IN {_UNFINISHED_SQL} AND {_LIVE}",
                                (time.time(),)).fetchall()
            return rows, dict(conn.execute("SELECT owner, expires_at FROM heartbeats").fetchall())

        def fail(conn: sqlite3.Connection, response_id: str) -> bool:
            # Re-read under the write lock: the owner may have finished it (or a peer failed it) since the scan.
            row = conn.execute(f"SELECT response FROM responses WHERE id = ? AND status IN {_UNFINISHED_SQL}",
                               (response_id,)).fetchone()
            if row is None:
                return False
            response = {**json.loads(row[0]), "status": "failed", "error": error}
            conn.execute("UPDATE responses SET response = ?, status = 'failed', owner = NULL WHERE id = ?",
                         (_dumps(response), response_id))
            last = conn.execute("SELECT data FROM events WHERE response_id = ? ORDER BY seq DESC LIMIT 1",
                                (response_id,)).fetchone()
            if last is not None:
                event = orphan_event(response, [json.loads(last[0])])
                conn.execute("INSERT INTO events (response_id, seq, data) VALUES (?, ?, ?)",
                             (response_id, event["sequence_number"], _dumps(event)))
            return True

        rows, beats = await self._run(self._read, scan)
        now = time.time()
        failed = []
        for response_id, owner in rows:
            if owner and owner_alive(owner, beats.get(owner), now):
                continue
            if await self._run(self._write, lambda conn: fail(conn, response_id)):
                failed.append(response_id)
        return failed

    # ---- conversations ----

    async def create_conversation(self, conversation: Json, items: Sequence[Json] = ()) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO conversations (id, data) VALUES (?, ?)",
                         (conversation["id"], _dumps(conversation)))
            self._write_scope(conn, conversation["id"], items)

        await self._run(self._write, write)

    async def get_conversation(self, conversation_id: str) -> Json | None:
        def read() -> Json | None:
            row = self._conn().execute("SELECT data FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            return json.loads(row[0]) if row is not None else None

        return await self._run(read)

    async def update_conversation(self, conversation_id: str, metadata: Json) -> Json | None:
        def write(conn: sqlite3.Connection) -> Json | None:
            row = conn.execute("SELECT data FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is None:
                return None
            conversation = {**json.loads(row[0]), "metadata": dict(metadata)}
            conn.execute("UPDATE conversations SET data = ? WHERE id = ?", (_dumps(conversation), conversation_id))
            return conversation

        return await self._run(self._write, write)

    async def delete_conversation(self, conversation_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM items WHERE scope = ?", (conversation_id,))
            return conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0

        return await self._run(self._write, write)

    # ---- retention ----

    async def purge_expired(self) -> int:
        def write(conn: sqlite3.Connection) -> int:
            now = time.time()
            expired = "SELECT id FROM responses WHERE expires_at <= ?"
            conn.execute(f"DELETE FROM items WHERE scope IN ({expired}) OR scope IN "
                         f"(SELECT id || '/output' FROM responses WHERE expires_at <= ?)", (now, now))
            conn.execute(f"DELETE FROM events WHERE response_id IN ({expired})", (now,))
            conn.execute("DELETE FROM heartbeats WHERE expires_at <= ?", (now - HEARTBEAT_TTL,))
            return conn.execute("DELETE FROM responses WHERE expires_at <= ?", (now,)).rowcount

        return await self._run(self._write, write)
