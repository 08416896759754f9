"""Background responses: generation that goes on without the client, its event log, cancels, and replica upkeep.

`Runner` (one per server process) owns:

* the background tasks of this replica: each runs a response to its end, writing its stream events to the store's
  event log (batched: whatever piled up while the store was busy goes in one write) so any replica can replay them;
* the cancel listener: a cancel published anywhere (`POST /v1/responses/{id}/cancel` on any replica) stops the task
  here and frees the compute — the response ends `cancelled` with the output it had;
* upkeep: a heartbeat (so other replicas know we are alive), crash recovery at start-up (responses left unfinished
  by a dead replica are marked `failed`), and the retention sweep of expired responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .events import Sequencer
from .state import TERMINAL_EVENTS, State
from .store.base import HEARTBEAT_TTL, UNFINISHED, ResponseRecord, orphan_event

logger = logging.getLogger("transformers_responses")

Json = dict[str, Any]

PURGE_EVERY = 3600.0
SHUTDOWN_ERROR: Json = {"code": "server_error",
                        "message": "The server shut down before this background response finished. Create it again."}


class Runner:
    """Background tasks and upkeep of one replica; `start()` in the app's lifespan, `stop()` at shutdown."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.store = state.store
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.stops: dict[str, Callable[[], None]] = {}
        self._upkeep: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.store.start()
        await self.store.heartbeat(self.state.owner)
        failed = await self.store.fail_orphans()
        if failed:
            logger.warning("transformers-responses: %d response(s) left unfinished by a stopped server were marked "
                           "failed: %s", len(failed), ", ".join(failed[:10]))
        purged = await self.store.purge_expired()
        if purged:
            logger.info("transformers-responses: removed %d expired response(s)", purged)
        self._upkeep = [asyncio.create_task(self._heartbeats()), asyncio.create_task(self._cancels()),
                        asyncio.create_task(self._purges())]

    async def stop(self) -> None:
        running = list(self.tasks)
        for task in [*self.tasks.values(), *self._upkeep]:
            task.cancel()
        await asyncio.gather(*self.tasks.values(), *self._upkeep, return_exceptions=True)
        await self.state.drain()
        # What we were generating will not finish now: say so rather than leave it in progress.
        for response_id in running:
            record = await self.store.get_response(response_id)
            if record is not None:
                failed = {**record.response, "status": "failed", "error": SHUTDOWN_ERROR}
                if await self.store.update_response(response_id, failed, only_if_status=UNFINISHED):
                    events = await self.store.read_events(response_id)
                    await self.store.append_events(response_id, [orphan_event(failed, events)])
        await self.store.close()

    # ---- background responses ----

    def launch(self, record: ResponseRecord, events: AsyncIterator[Json], stop: Callable[[], None]) -> None:
        """Run `events` (a response's full stream, terminal event last) to its end in the background."""
        self.stops[record.id] = stop
        self.tasks[record.id] = asyncio.create_task(self._run(record, events))

    async def _run(self, record: ResponseRecord, events: AsyncIterator[Json]) -> None:
        queue: asyncio.Queue[Json | None] = asyncio.Queue()
        writer = asyncio.create_task(self._write_log(record.id, queue))
        seq = Sequencer()
        try:
            async for event in events:
                seq.number(event)
                if event["type"] in TERMINAL_EVENTS:
                    # The response is committed before its terminal event can be read by anyone.
                    queue.put_nowait(None)
                    await writer
                    stored = await self.state.commit(record, event["response"])
                    if stored is None:  # deleted while it ran: nothing of it is kept
                        return
                    if stored["status"] != event["response"]["status"]:
                        event = {"type": f"response.{stored['status']}", "response": stored,
                                 "sequence_number": event["sequence_number"]}
                    await self.store.append_events(record.id, [event])
                    return
                if event["type"] == "response.in_progress":  # polls now see it running, not queued
                    await self.store.update_response(record.id, event["response"], only_if_status=("queued",),
                                                     owner=self.state.owner)
                queue.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception:  # a fault here must not leave the response in progress forever
            logger.exception("background response %s failed", record.id)
            failed = {**record.response, "status": "failed",
                      "error": {"code": "server_error", "message": "The server failed while running this response."}}
            stored = await self.state.commit(record, failed)
            if stored is not None:  # the stored status wins (a cancel may have come first)
                await self.store.append_events(record.id, [{"type": f"response.{stored['status']}",
                                                            "response": stored, "sequence_number": seq.next}])
        finally:
            if not writer.done():
                queue.put_nowait(None)
                await asyncio.gather(writer, return_exceptions=True)
            self.tasks.pop(record.id, None)
            self.stops.pop(record.id, None)
            await events.aclose()  # type: ignore[attr-defined]

    async def _write_log(self, response_id: str, queue: asyncio.Queue[Json | None]) -> None:
        while True:
            first = await queue.get()
            batch = [] if first is None else [first]
            done = first is None
            while not done and not queue.empty():
                item = queue.get_nowait()
                if item is None:
                    done = True
                else:
                    batch.append(item)
            if batch:
                await self.store.append_events(response_id, batch)
            if done:
                return

    def cancel_local(self, response_id: str) -> bool:
        stop = self.stops.get(response_id)
        if stop is None:
            return False
        stop()
        return True

    # ---- upkeep ----

    async def _forever(self, what: str, step: Callable[[], Awaitable[Any]], every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the replica serving; the next round may succeed
                logger.exception("transformers-responses: %s failed", what)

    async def _heartbeats(self) -> None:
        async def beat() -> None:
            await self.store.heartbeat(self.state.owner)
            await self.store.fail_orphans()  # another replica may have died
            for response_id in list(self.tasks):  # a cancel signal can be lost (pub/sub is fire and forget)
                record = await self.store.get_response(response_id)
                if record is None or record.status == "cancelled":
                    self.cancel_local(response_id)

        await self._forever("heartbeat", beat, HEARTBEAT_TTL / 3)

    async def _purges(self) -> None:
        await self._forever("retention sweep", self.store.purge_expired, PURGE_EVERY)

    async def _cancels(self) -> None:
        while True:
            try:
                async for response_id in self.store.cancel_requests():
                    self.cancel_local(response_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("transformers-responses: cancel listener failed; restarting it")
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(1.0)
