"""Reading what a job staged in Cloud Storage: its output's chunks, their tail, its result (checked).

With google-cloud-storage (the ``staging`` extra: ``pip install 'airflow-provider-slurmapi[staging]'``),
Google's maintained client: it takes the connection's google-auth credentials (impersonation chain
included) as they are, honours ``STORAGE_EMULATOR_HOST`` as Google's tools do, and retries its reads.
Its calls are blocking: the trigger makes them in a worker thread. The names read are the ones
:mod:`airflow_provider_slurmapi.api.staging` lays out; a staged result is used only when it has the size
and SHA-256 the job published in its own Slurm comment (:class:`~.staging.StagedReport`), so another
writer to the bucket cannot swap it.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_slurmapi.api.results import (
    QUOTED_LINES,
    RESULT_OK,
    Published,
    Reading,
    ResultError,
    read,
    tail_text,
)
from airflow_provider_slurmapi.api.staging import (
    CHANGES,
    EPOCH_DIGITS,
    RESULT_OBJECT,
    STREAMS,
    StagedReport,
    StagingLocation,
    parse_announcement,
    parse_chunk,
    parse_inline,
)

STAGING_EXTRA = "airflow-provider-slurmapi[staging]"
DEFAULT_MAX_RESULT_BYTES = 10 * 2**20
# How much of the end of a stream a tail reads at most, whatever the lines asked for.
TAIL_READ_LIMIT = 8 * 2**20


class StagedReadError(ValueError):
    """What a job staged cannot be used: its result too large, altered, or unreadable."""


def storage_client(credentials: Any, project: str | None = None) -> Any:
    """A ``google.cloud.storage.Client`` with ``credentials`` (a clear ImportError without the extra)."""
    try:
        from google.cloud import storage
    except ImportError:
        raise ImportError(
            f"Reading staged output and results needs google-cloud-storage: pip install '{STAGING_EXTRA}'"
        ) from None
    client = storage.Client(project=project or None, credentials=credentials)
    _settle_environment(client)
    return client


def _settle_environment(client: Any) -> None:
    """Read the environment's proxy and CA settings for the storage endpoint once, not on every request.

    A ``requests`` session that trusts the environment walks all of ``os.environ`` several times per
    request (proxies, ``NO_PROXY``, netrc, CA bundle): with an Airflow process's environment that was a
    third of the CPU a triggerer spent reading 1,000 jobs' output (``benchmarks/streaming_at_scale.py``).
    The client only ever talks to one endpoint, so the settings that apply to it are resolved here, as
    ``requests`` would, and the session keeps them: a proxy (unless ``NO_PROXY`` exempts the endpoint),
    ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``. A change of those variables later in the process is not
    seen by this client (each hook makes its own)."""
    session = client._http
    settings = session.merge_environment_settings(client.api_endpoint, {}, None, None, None)
    session.trust_env = False
    session.proxies.update(settings.get("proxies") or {})
    if settings.get("verify") is not None:
        session.verify = settings["verify"]
    if settings.get("cert") is not None:
        session.cert = settings["cert"]


@dataclass(frozen=True)
class Chunk:
    """A chunk of a stream; ``size`` None when only its announcement named it (not listed yet); ``data``
    its bytes when its announcement carried them (then nothing reads its object)."""

    stream: str
    offset: int
    size: int | None
    name: str
    data: bytes | None = None


@dataclass
class StreamCursor:
    """How far the reader has read each stream of one job run (the next byte offset of each)."""

    offsets: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))


def chunks(client: Any, location: StagingLocation) -> dict[str, list[Chunk]]:
    """The chunks of each stream below one job run's ``location`` (one listing), in order."""
    prefix = location.object_name("")
    found: dict[str, list[Chunk]] = {stream: [] for stream in STREAMS}
    for blob in client.list_blobs(location.bucket, prefix=prefix):
        parsed = parse_chunk(blob.name[len(prefix) :])
        if parsed is not None:
            found[parsed[0]].append(Chunk(parsed[0], parsed[1], int(blob.size or 0), blob.name))
    for items in found.values():
        items.sort(key=lambda c: c.offset)
    return found


def read_new(
    client: Any,
    location: StagingLocation,
    cursor: StreamCursor,
    listed: dict[str, list[Chunk]] | None = None,
    done: set[str] | None = None,
) -> dict[str, bytes]:
    """The bytes of each stream past ``cursor`` (which moves on), in order: each byte once, even where a
    chunk overlaps one read before (an upload cut short and made again). ``done``: the names of chunks
    read to their end (this adds to it), so that a chunk of unknown size (announced, not listed) that
    starts before the cursor is not asked for again."""
    listed = chunks(client, location) if listed is None else listed
    done = set() if done is None else done
    bucket = None
    new: dict[str, bytes] = {}
    for stream, items in listed.items():
        parts = []
        at = cursor.offsets.get(stream, 0)
        for chunk in items:
            if chunk.offset > at:  # past a gap not staged (yet)
                break
            if chunk.name in done or (chunk.size is not None and chunk.offset + chunk.size <= at):
                done.add(chunk.name)
                continue
            if chunk.data is None:
                bucket = client.bucket(location.bucket) if bucket is None else bucket
                data = _download(bucket, chunk.name, at - chunk.offset)
            else:
                data = chunk.data[at - chunk.offset :]
            done.add(chunk.name)
            parts.append(data)
            at += len(data)
        cursor.offsets[stream] = at
        if parts:
            new[stream] = b"".join(parts)
    return new


def needs_request(listed: dict[str, list[Chunk]], cursor: StreamCursor, done: set[str]) -> bool:
    """Whether :func:`read_new` of ``listed`` from ``cursor`` would read an object: a chunk it would read
    that did not come with its bytes."""
    for stream, items in listed.items():
        at = cursor.offsets.get(stream, 0)
        for chunk in items:
            if chunk.offset > at:
                break
            if chunk.name in done or (chunk.size is not None and chunk.offset + chunk.size <= at):
                continue
            if chunk.data is None:
                return True
            at = chunk.offset + len(chunk.data)
    return False


def _download(bucket: Any, name: str, start: int) -> bytes:
    """The bytes of object ``name`` from ``start`` on; none when it is shorter (HTTP 416)."""
    from google.api_core.exceptions import RequestRangeNotSatisfiable

    try:
        return bytes(bucket.blob(name).download_as_bytes(start=start))
    except RequestRangeNotSatisfiable:
        return b""


def read_tail(
    client: Any, location: StagingLocation, stream: str, lines: int, listed: dict[str, list[Chunk]] | None = None
) -> str:
    """The last ``lines`` lines of ``stream`` (reading at most ``TAIL_READ_LIMIT`` bytes of its end);
    ``listed``: the run's chunks when already listed (:func:`chunks`)."""
    if lines <= 0:
        return ""
    items = (chunks(client, location) if listed is None else listed)[stream]
    bucket = client.bucket(location.bucket)
    pieces: list[bytes] = []
    taken = 0
    for chunk in reversed(items):
        size = chunk.size or 0
        start = max(0, size - (TAIL_READ_LIMIT - taken))
        data = bucket.blob(chunk.name).download_as_bytes(start=start) if size else b""
        pieces.insert(0, data)
        taken += len(data)
        if b"".join(pieces).count(b"\n") > lines or taken >= TAIL_READ_LIMIT or start > 0:
            break
    text = b"".join(pieces).decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])


def read_result(client: Any, location: StagingLocation, report: StagedReport, max_bytes: int) -> bytes:
    """The staged result of one job run, when it is exactly what the job published (size and SHA-256)."""
    if report.result is None:
        raise StagedReadError("the job staged no result")
    size, sha256 = report.result
    uri = location.object_uri(RESULT_OBJECT)
    if size > max_bytes:
        raise StagedReadError(
            f"the job's result {uri} is {size} bytes, more than max_result_bytes={max_bytes}: raise "
            "max_result_bytes, or return a smaller value (e.g. metrics and the URI of a file with the rest)"
        )
    blob = client.bucket(location.bucket).get_blob(location.object_name(RESULT_OBJECT))
    if blob is None:
        raise StagedReadError(f"the job's result {uri} is not there (deleted since the job wrote it?)")
    if int(blob.size or 0) != size:
        raise StagedReadError(
            f"the job's result {uri} is {blob.size} bytes, not the {size} the job published: it was replaced "
            "after the job wrote it, so it is not used"
        )
    data = blob.download_as_bytes(if_generation_match=blob.generation)
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise StagedReadError(
            f"the job's result {uri} does not have the SHA-256 the job published: it was altered after the job "
            "wrote it, so it is not used"
        )
    return data


def lost_words(report: StagedReport) -> Iterable[str]:
    """What the job could not stage, one phrase each, for the task log."""
    streams = [("stdout", report.stdout)]
    if report.stderr is not None:
        streams.append(("stderr", report.stderr))
    for name, (staged, total) in streams:
        if staged < total:
            yield f"the last {total - staged} of the {total} bytes of its {name}"
    if report.result_lost:
        yield "its result"


def read_staged(
    summary: Mapping[str, Any],
    client: Any,
    location_of: Callable[[Mapping[str, Any], StagedReport], StagingLocation],
    lines: int,
    max_bytes: int,
) -> tuple[Reading, dict[str, str]]:
    """What a finished job (or each task of an array) published, with what it staged read from Cloud
    Storage: the tails of its output (``lines`` lines, no comment-size cap) and its result (checked
    against the size and SHA-256 it published). A job that staged nothing is read from its comment as
    before (:func:`~.results.read` walks the array). Returns the reading and, per job, its output's URI."""
    uris: dict[str, str] = {}

    def read_one(item: Mapping[str, Any]) -> Reading:
        return _read_staged_one(item, client, location_of, lines, max_bytes, uris)

    return read(summary, read_one), uris


def _read_staged_one(
    item: Mapping[str, Any],
    client: Any,
    location_of: Callable[[Mapping[str, Any], StagedReport], StagingLocation],
    lines: int,
    max_bytes: int,
    uris: dict[str, str],
) -> Reading:
    published = Published.from_dict(item.get("published"))
    report = StagedReport.parse(published.staged) if published is not None and published.staged else None
    if published is None or report is None:
        return read(item)
    display = str(item.get("display_id") or item.get("job_id"))
    label = f"Slurm job {display}"
    location = location_of(item, report)
    uris[display] = location.uri
    reading = Reading()
    lost = list(lost_words(report))
    if lost:
        reading.log.append(f"{label}: could not stage {', '.join(lost)} in {location.uri}: {report.error}")
    streams = [("stdout", "output (stdout and stderr)" if report.stderr is None else "stdout")]
    if report.stderr is not None:
        streams.append(("stderr", "stderr"))
    tails: dict[str, str] = {}
    listed: dict[str, list[Chunk]] | None = None
    for stream, words in streams:
        try:
            listed = chunks(client, location) if listed is None else listed  # one listing for both streams
            tails[stream] = read_tail(client, location, stream, lines, listed)
        except Exception as err:  # the storage's fault: the comment's tail stands in
            reading.log.append(f"{label}: could not read its staged {stream} ({type(err).__name__}: {err})")
            tails[stream] = published.stdout_tail if stream == "stdout" else published.stderr_tail
        reading.log.append(tail_text(f"{label} {words}", tails[stream]))
    stderr = tails["stdout"] if report.stderr is None else tails["stderr"]
    reading.quote = "\n".join(stderr.splitlines()[-QUOTED_LINES:])
    if report.result is not None:
        try:
            data = read_result(client, location, report, max_bytes)
            text = data.decode("utf-8")
        except StagedReadError as err:
            reading.error = f"{label}: {err}"
            return reading
        except UnicodeDecodeError:
            reading.error = f"{label}: the job's result {location.object_uri(RESULT_OBJECT)} is not UTF-8 text"
            return reading
        try:
            reading.result = Published(RESULT_OK, text, "", "", False).result()
            reading.has_result = True
        except ResultError as err:
            reading.error = f"{label}: {err}"
    elif published.has_result:  # not staged (the storage failed), or published in the comment only
        try:
            reading.result, reading.has_result = published.result(), True
        except ResultError as err:
            reading.error = f"{label}: its result was not staged ({report.error}), and {err}"
            return reading
        if report.result_lost:
            reading.log.append(f"{label}: its result was not staged; the copy in its Slurm comment is used")
    elif report.result_lost:
        reading.error = f"{label}: its result was not staged ({report.error}), so it cannot be read"
    return reading


# How a task logs a line of its job's output while it follows it (the worker's wait and the trigger), and how
# the job page finds those lines again in the task's log.
LOGGED_LINE = re.compile(r"\[(?P<job>[0-9]+(?:_[0-9]+)?) (?P<stream>stdout|stderr)\] (?P<text>.*)", re.DOTALL)


def logged_line(job: str, stream: str, line: str) -> str:
    """A followed line as the task logs it: ``[42 stdout] text``; a note of the follower's (no stream) as
    it is."""
    return f"[{job} {stream}] {line}" if stream else line


# The lines one poll found go to the task log in records of at most about this many characters, not a record
# per line: a record costs the log's handlers (and a triggerer's event loop) about the same whatever its
# length, and a triggerer that follows 1,000 jobs may log thousands of lines a tick. Each line of a record
# is still ``[42 stdout] text``, which is how the job page finds them (``LOGGED_LINE``, line by line).
LOG_RECORD_CHARS = 64 * 1024


def logged_records(job: str, found: Iterable[tuple[str, str]], limit: int = LOG_RECORD_CHARS) -> list[str]:
    """The ``(stream, line)`` a follower returned, as the task logs them: the lines in order, each as
    :func:`logged_line` gives it, joined by newlines into records of at most ``limit`` characters (a longer
    line makes a record of its own)."""
    records: list[str] = []
    held: list[str] = []
    size = 0
    for stream, line in found:
        text = logged_line(job, stream, line)
        if held and size + len(text) > limit:
            records.append("\n".join(held))
            held, size = [], 0
        held.append(text)
        size += len(text) + 1
    if held:
        records.append("\n".join(held))
    return records


# How far back (seconds) a listing of a staging location's announcements starts before the newest one it saw.
# An announcement is named by its node's clock just before its upload (one small object, right after its
# chunk), so it lands within a second or two of that time unless the storage is slow or the node's clock is
# off. Most listings start CHANGES_RECENT before the newest (they return little more than what is new, with
# the small chunks' bytes); one every CHANGES_WINDOW seconds, a sweep, starts CHANGES_WINDOW before it, and
# finds what landed later than that. One that lands later still is not listed: its chunk is found by its
# follower's gap check (GAP_RELIST_SECONDS) or at its job's end; its lines come later, none is lost.
CHANGES_WINDOW = 20
CHANGES_RECENT = 2
# A follower that knows of a chunk past a gap (an announcement that was lost, or not listed) for this long
# lists its job's objects itself once.
GAP_RELIST_SECONDS = 60.0


class ChangeFeed:
    """What is new below one staging location: each :meth:`poll` makes one listing of its announcements
    (``.changes/``, from shortly before the newest seen on: ``startOffset``; from :data:`CHANGES_WINDOW`
    before it every that many seconds) and returns the chunks announced
    since the last poll, each once: their object names, with their bytes where the announcement carried them
    (:func:`~airflow_provider_slurmapi.api.staging.parse_inline`). Blocking; one feed serves every follower
    of the location (see :class:`OutputFollower`'s ``announced``)."""

    def __init__(self, root: StagingLocation, clock: Callable[[], float] = time.time) -> None:
        self.root = root
        self.clock = clock
        self.newest: int | None = None  # the latest time of an announcement seen
        self.seen: dict[str, int] = {}  # the announcements listed in the window, with their times
        self.listings = 0  # how many listings were made (pages included)
        self.last_floor = 0
        self.last_sweep: float | None = None  # when the last listing of the whole window was made

    def floor(self) -> int:
        """The time the next listing starts at: the newest announcement seen (never past this host's
        clock), less :data:`CHANGES_WINDOW`; never before the last listing's."""
        now = int(self.clock())
        newest = now if self.newest is None else min(self.newest, now)
        self.last_floor = max(self.last_floor, newest - CHANGES_WINDOW)  # never back
        return self.last_floor

    def poll(self, client: Any) -> list[tuple[str, bytes | None]]:
        floor = self.floor()
        now = self.clock()
        start_at = floor
        if self.last_sweep is not None and now - self.last_sweep < CHANGES_WINDOW and self.newest is not None:
            start_at = max(floor, min(self.newest, int(now)) - CHANGES_RECENT)
        else:
            self.last_sweep = now
        head = self.root.object_name(f"{CHANGES}/")
        start = f"{head}{start_at:0{EPOCH_DIGITS}d}"
        blobs = client.list_blobs(
            self.root.bucket, prefix=head, start_offset=start, fields="items(name,metadata),nextPageToken"
        )
        new: list[tuple[str, bytes | None]] = []
        for page in blobs.pages:
            self.listings += 1
            for blob in page:
                if blob.name in self.seen:
                    continue
                parsed = parse_announcement(self.root, blob.name)
                if parsed is None:
                    continue
                self.seen[blob.name] = parsed[0]
                self.newest = parsed[0] if self.newest is None else max(self.newest, parsed[0])
                new.append((parsed[1], parse_inline(blob.metadata)))
        self.seen = {name: at for name, at in self.seen.items() if at >= floor}
        return new


# An object of a job's run below its task instance's prefix: try-<n>/<job>/run-<r>/<name>.
_RUN_OBJECT = re.compile(r"try-([0-9]+)/([0-9]+(?:_[0-9]+)?)/run-([0-9]+)/(.+)", re.DOTALL)


class OutputFollower:
    """Follows one job's staged output while it runs: each :meth:`poll` finds the job's newest run below
    the task instance's prefix (whichever try submitted it; a requeued job writes a new run), reads only
    the chunks past what was read, and returns the complete lines, each once, in order. Blocking: the
    trigger calls it in a worker thread.

    Alone (``announced=False``), each poll makes one listing of the task instance's prefix. Fed by a
    :class:`ChangeFeed` (``announced=True``: :meth:`announce` hands it the chunks the feed found), it lists
    only what the announcements cannot tell: when the first chunk it is told of does not start where it is
    (the job staged before the feed listened: at once), when it was told of nothing for
    :data:`GAP_RELIST_SECONDS` after its first poll (the same, with the job silent since), when a chunk it
    was told of stays past a gap that long (an announcement that was lost), and at the job's end unless the
    job's report shows everything was read (:meth:`poll` with ``ended``). A poll with nothing new costs no
    request; a trigger that follows its job from its start lists nothing while it runs."""

    def __init__(
        self,
        client: Any,
        task_instance: StagingLocation,
        job: str,
        *,
        announced: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.task_instance = task_instance
        self.job = job
        self.announced = announced
        self.clock = clock
        self.current: tuple[int, int] | None = None
        self.cursor = StreamCursor()
        self.partial: dict[str, bytes] = {}
        self.known: dict[tuple[int, int], dict[str, dict[str, Chunk]]] = {}
        self.done: set[str] = set()
        self.listed = False
        self.first_poll: float | None = None
        self.gap_since: float | None = None
        self.list_due = False  # a listing is wanted at the next poll that may make requests
        # announced chunks (their names, with their bytes if the announcement carried them), handed over by
        # another thread
        self.inbox: deque[tuple[str, bytes | None]] = deque()
        # Called (with no argument) once a feed has handed over chunks: a trigger wakes to poll then, not
        # every tick. Set by the trigger; called on the event loop that routes the feed's listing.
        self.on_news: Callable[[], None] | None = None

    def announce(self, chunks: Iterable[str | tuple[str, bytes | None]]) -> None:
        """Chunks the feed found (object names, or ``(name, bytes)`` where the announcement carried the
        chunk's bytes: then its object is not read); those of other jobs are left out at the next poll.
        Safe to call from another thread than :meth:`poll`'s."""
        self.inbox.extend((item, None) if isinstance(item, str) else item for item in chunks)

    def idle(self) -> bool:
        """Fed, told of nothing new, waiting past no gap and not due to list: a :meth:`poll` (not at the
        job's end) would find nothing, without a request; the trigger skips it."""
        return (
            self.announced and not self.inbox and self.gap_since is None and not self.list_due and not self._quiet_due()
        )

    def due_in(self) -> float | None:
        """Fed: the seconds until a :meth:`poll` is due though the feed told of nothing new (a gap's or a
        quiet job's listing, see :data:`GAP_RELIST_SECONDS`), 0 when it is due; None when only news (or
        the job's end) makes one worth it. Alone, 0: it lists every poll."""
        if not self.announced or self.list_due:
            return 0.0
        now = self.clock()
        due = []
        if self.gap_since is not None:
            due.append(self.gap_since + GAP_RELIST_SECONDS - now)
        if not self.listed and not self.known and self.first_poll is not None:
            due.append(self.first_poll + GAP_RELIST_SECONDS - now)
        return max(0.0, min(due)) if due else None

    def _quiet_due(self) -> bool:
        """Never listed, told of nothing for :data:`GAP_RELIST_SECONDS` since the first poll: what the job
        staged before the feed listened (a trigger that started late, its job silent since) is looked for."""
        return (
            not self.listed
            and not self.known
            and self.first_poll is not None
            and self.clock() - self.first_poll >= GAP_RELIST_SECONDS
        )

    def _learn(self, name: str, size: int | None, data: bytes | None = None) -> None:
        prefix = self.task_instance.object_name("")
        named = _RUN_OBJECT.fullmatch(name[len(prefix) :]) if name.startswith(prefix) else None
        parsed = parse_chunk(named.group(4)) if named and named.group(2) == self.job else None
        if named is None or parsed is None:
            return
        streams = self.known.setdefault((int(named.group(1)), int(named.group(3))), {s: {} for s in STREAMS})
        had = streams[parsed[0]].get(name)
        if data is not None:
            size = len(data)
        if had is None or had.size is None or (had.data is None and data is not None and had.size == size):
            streams[parsed[0]][name] = Chunk(parsed[0], parsed[1], size, name, data)

    def _list(self) -> None:
        """What is staged, afresh: an announced chunk that is not there (another writer to the bucket may
        announce anything) is forgotten, so it cannot hold the follower in a gap."""
        self.known = {}
        for blob in self.client.list_blobs(self.task_instance.bucket, prefix=self.task_instance.object_name("")):
            self._learn(blob.name, int(blob.size or 0))
        self.listed, self.gap_since, self.list_due = True, None, False

    def _gapped(self) -> bool:
        """A chunk is known past what could be read of the current run (checked after a read)."""
        if self.current is None:
            return False
        for stream, items in self.known.get(self.current, {}).items():
            at = self.cursor.offsets.get(stream, 0)
            if any(chunk.offset > at for chunk in items.values()):
                return True
        return False

    def poll(self, ended: bool = False, report: StagedReport | None = None) -> list[tuple[str, str]]:
        """``(stream, line)`` of every line completed since the last poll (a line still being written
        waits for its end, or for :meth:`flush`); ``("", note)`` when the job moved on to a new run.
        ``ended``: the job has ended, so everything it staged is read: listed, unless ``report`` (what the
        job's wrapper published at its end) shows that the announced chunks held all of it."""
        found = self._poll(ended, report, offline=False)
        assert found is not None
        return found

    def poll_offline(self) -> list[tuple[str, str]] | None:
        """:meth:`poll` (the job running) when it needs no request: fed, no listing due, and every chunk to
        read came with its bytes in its announcement. Then it does not block, and a trigger runs it on its
        event loop (no worker thread); None, having read nothing, when a :meth:`poll` is needed. A listing
        it finds wanted (a chunk past where the follower is, never listed) is left to that next poll."""
        return self._poll(False, None, offline=True)

    def _poll(self, ended: bool, report: StagedReport | None, offline: bool) -> list[tuple[str, str]] | None:
        if offline and not self.announced:
            return None
        while self.inbox:
            name, data = self.inbox.popleft()
            self._learn(name, None, data)
        if self.first_poll is None:
            self.first_poll = self.clock()
        gap_old = self.gap_since is not None and self.clock() - self.gap_since >= GAP_RELIST_SECONDS
        if not self.announced or gap_old or self.list_due or self._quiet_due() or (ended and report is None):
            if offline:
                return None
            self._list()
        found = self._read(offline)
        if found is None:
            return None
        # Fed, not listed yet: a chunk it was told of that does not start where it is shows the job staged
        # before the feed listened (the trigger started after the job did): listed at once.
        started_late = self.announced and not self.listed and self._gapped()
        if offline:
            self.list_due = started_late
        elif started_late or (ended and report is not None and not self._all_read(report)):
            self._list()
            found.extend(self._read() or [])
        return found

    def _all_read(self, report: StagedReport) -> bool:
        """Every byte ``report`` says the job's run staged has been read (nothing is left to list for)."""
        staged = {"stdout": report.stdout[0], "stderr": report.stderr[0] if report.stderr else 0}
        return self.current == (report.try_number, report.run) and all(
            self.cursor.offsets.get(stream, 0) >= size for stream, size in staged.items()
        )

    def _read(self, offline: bool = False) -> list[tuple[str, str]] | None:
        """The lines of the newest run's chunks past the cursor; ``offline``: None, having changed nothing,
        when that would read an object."""
        if not self.known:
            return []
        newest = max(self.known, key=lambda key: (key[1], key[0]))
        listed = {
            stream: sorted(items.values(), key=lambda c: c.offset) for stream, items in self.known[newest].items()
        }
        if offline and needs_request(listed, self.cursor if newest == self.current else StreamCursor(), self.done):
            return None
        found: list[tuple[str, str]] = []
        if newest != self.current:
            if self.current is not None:
                found.extend(self.flush())
                found.append(("", f"Slurm job {self.job} was requeued: the output of its run {newest[1]} follows"))
            self.current, self.cursor, self.partial = newest, StreamCursor(), {}
        for stream, data in read_new(self.client, self.task_instance, self.cursor, listed, self.done).items():
            text = self.partial.pop(stream, b"") + data
            *complete, rest = text.split(b"\n")
            if rest:
                self.partial[stream] = rest
            found.extend((stream, line.decode("utf-8", "replace")) for line in complete)
        for items in self.known[newest].values():  # what was read is not looked at again (``done`` has it)
            for name in [name for name in items if name in self.done]:
                del items[name]
        if not self._gapped():
            self.gap_since = None
        elif self.gap_since is None:
            self.gap_since = self.clock()
        return found

    def position(self) -> dict[str, Any] | None:
        """Where the lines returned so far end: the run followed and, per stream, the offset just past the
        last complete line (a JSON-able value, for :meth:`resume`); None before anything was listed."""
        if self.current is None:
            return None
        offsets = {s: at - len(self.partial.get(s, b"")) for s, at in self.cursor.offsets.items()}
        return {"job": self.job, "try": self.current[0], "run": self.current[1], "offsets": offsets}

    def resume(self, position: Any) -> bool:
        """Go on from a :meth:`position` an earlier follower of this job returned (a trigger that a
        triggerer restart replaced): its lines are not returned again. False, and nothing changes, when
        ``position`` is not one of this job's."""
        if not isinstance(position, dict) or str(position.get("job")) != self.job:
            return False
        try:
            current = (int(position["try"]), int(position["run"]))
            offsets = {s: int(position["offsets"].get(s, 0)) for s in STREAMS}
        except (KeyError, TypeError, ValueError, AttributeError):
            return False
        if any(at < 0 for at in offsets.values()):
            return False
        self.current, self.cursor, self.partial = current, StreamCursor(dict(offsets)), {}
        return True

    def flush(self) -> list[tuple[str, str]]:
        """The lines still held without their end."""
        held = [(stream, data.decode("utf-8", "replace")) for stream, data in self.partial.items() if data]
        self.partial = {}
        return held
