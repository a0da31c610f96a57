"""One listing of a staging location's announcements per poll interval for every trigger that follows a job
staged there: the followers of a triggerer read only the chunks that are new, so what streaming costs in
Cloud Storage requests grows with the output written, not with the number of jobs followed.

Like :class:`~airflow_provider_slurmapi.triggers.poller.SharedJobPoller`, a feed lives in memory: it starts
with the first follower that subscribes in an event loop and is dropped with the last. Its task lists once
per interval while it has followers, hands each subscribed follower its task instance's new chunks (their
names, and the small ones' bytes) and wakes the trigger of each follower it handed something to
(``OutputFollower.on_news``): a trigger whose job printed nothing new is not woken at all. A follower whose
job has ended asks it to :meth:`SharedChangeFeed.refresh` with the time the end was seen, to have a listing
that began after it (the followers asking meanwhile share it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_slurmapi.api.staging import StagingLocation
from airflow_provider_slurmapi.api.storage import ChangeFeed, OutputFollower

log = logging.getLogger(__name__)


class SharedChangeFeed:
    """The announcements of one staging location, listed at most once per ``interval`` seconds."""

    _registry: dict[tuple[int, str, str], SharedChangeFeed] = {}

    def __init__(
        self, key: tuple[int, str, str], feed: ChangeFeed, make_client: Callable[[], Any], interval: float
    ) -> None:
        self.key = key
        self.feed = feed
        self.interval = interval
        self._make_client = make_client
        self._client: Any = None
        self._client_lock = threading.Lock()
        self.subscribers: dict[str, set[OutputFollower]] = {}  # by task instance prefix
        self._last: float | None = None
        self._listing: asyncio.Future[None] | None = None
        self._listing_started = 0.0  # when the listing under way (or the last one) began
        self._task: asyncio.Task[None] | None = None
        self.failures = 0

    @classmethod
    def get(
        cls, conn_key: str, root: StagingLocation, interval: float, make_client: Callable[[], Any]
    ) -> SharedChangeFeed:
        """The feed of this event loop for the location ``root`` read with the connection ``conn_key``
        (created on first use); its interval is the shortest any subscriber asked for."""
        key = (id(asyncio.get_running_loop()), conn_key, root.uri)
        feed = cls._registry.get(key)
        if feed is None:
            feed = cls._registry[key] = cls(key, ChangeFeed(root), make_client, float(interval))
        feed.interval = min(feed.interval, float(interval))
        return feed

    def client(self) -> Any:
        """The feed's storage client, which its followers share (google-cloud-storage's clients may be
        shared across threads); made on first use. Blocking (reading the connection, building credentials):
        call it in a worker thread, never on the event loop."""
        with self._client_lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def subscribe(self, follower: OutputFollower) -> None:
        """Hand ``follower`` its task instance's new chunks from the next listing on (started once per
        interval by the feed's task, which the first subscriber starts). On the event loop."""
        self.subscribers.setdefault(follower.task_instance.object_name(""), set()).add(follower)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"slurm-changes-{self.key[2]}")

    async def _run(self) -> None:
        """List once per interval while anyone follows (a listing a follower asked for counts)."""
        while self.subscribers:
            last = self._last
            await asyncio.sleep(self.interval if last is None else max(0.0, last + self.interval - time.monotonic()))
            if not self.subscribers:
                return
            try:
                await self.refresh()
            except Exception:  # never: _list catches the storage's errors; the feed goes on regardless
                log.exception("Listing what is new in %s failed", self.feed.root.uri)

    def unsubscribe(self, follower: OutputFollower | None) -> None:
        """Leave (``None``: a trigger that got the feed but never followed anything); the last to leave drops
        the feed."""
        if follower is not None:
            prefix = follower.task_instance.object_name("")
            followers = self.subscribers.get(prefix)
            if followers is not None:
                followers.discard(follower)
                if not followers:
                    del self.subscribers[prefix]
        if not self.subscribers:
            if self._task is not None:
                self._task.cancel()
                self._task = None
            if self._registry.get(self.key) is self:
                del self._registry[self.key]

    async def refresh(self, since: float | None = None) -> None:
        """Make sure the followers were told what was announced up to at most ``interval`` seconds ago; with
        ``since`` (a ``time.monotonic()``), up to a listing that started at or after it: a follower whose job
        was seen ended asks for one that began after the look that saw it, which holds every chunk the job
        announced. The followers of jobs seen ended by the same tick share it."""
        while True:
            listing, started = self._listing, self._listing_started
            if listing is not None:
                await asyncio.shield(listing)
                if since is None or started >= since:
                    return
                continue
            if self._last is not None and (
                self._last >= since if since is not None else time.monotonic() - self._last < self.interval
            ):
                return
            await self._list()
            return

    async def _list(self) -> None:
        self._listing = asyncio.get_running_loop().create_future()
        self._last = self._listing_started = time.monotonic()
        try:
            found = await asyncio.to_thread(lambda: self.feed.poll(self.client()))
        except Exception as err:  # the storage's fault: the followers read what they missed at the job's end
            self.failures += 1
            log.warning("Could not list what is new in %s: %s", self.feed.root.uri, err)
            found = []
        finally:
            listing, self._listing = self._listing, None
            listing.set_result(None)
        self._route(found)

    def _route(self, found: list[tuple[str, bytes | None]]) -> None:
        """Hand each announced chunk (its name, and its bytes if the announcement carried them) to the
        followers of its task instance, then wake each follower that got any, once."""
        told: dict[int, OutputFollower] = {}
        for name, data in found:
            # .../<map_index>/try-<n>/<job>/run-<r>/<stream>/<offset>: the task instance's prefix ends
            # before the last "/try-" (a percent-quoted Airflow id never holds a "/").
            instance, has_try, _ = name.rpartition("/try-")
            if not has_try:
                continue
            for follower in self.subscribers.get(f"{instance}/", ()):
                follower.announce([(name, data)])
                told[id(follower)] = follower
        for follower in told.values():
            if follower.on_news is not None:
                follower.on_news()
