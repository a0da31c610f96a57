"""Reading what a job staged (api/storage.py), against fake-gcs-server: chunks read once each, in order,
overlaps and gaps, a requeued job's new run, tails, and the checked result."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from airflow_provider_slurmapi.api import storage
from airflow_provider_slurmapi.api.staging import (
    INLINE_LIMIT,
    StagedReport,
    StagingLocation,
    announcement_name,
    chunk_name,
    inline_metadata,
)
from tests.harness.storage import STAGING_BUCKET, FakeGcs

TASK = StagingLocation(STAGING_BUCKET, "unit").for_task_instance("d", "t", "r", -1)


@pytest.fixture
def client(fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    yield storage.storage_client(AnonymousCredentials(), "demo-project")


def put(fake_gcs: FakeGcs, location: StagingLocation, name: str, data: bytes) -> None:
    fake_gcs.write(STAGING_BUCKET, location.object_name(name), data)


def test_new_bytes_are_read_once_each_even_where_a_cut_upload_was_made_again(client, fake_gcs):
    run = StagingLocation(STAGING_BUCKET, f"{TASK.prefix}/try-1").for_job("7")
    cursor = storage.StreamCursor()
    put(fake_gcs, run, chunk_name("stdout", 0), b"one\ntw")
    assert storage.read_new(client, run, cursor) == {"stdout": b"one\ntw"}
    assert storage.read_new(client, run, cursor) == {}  # nothing new: nothing read
    # an upload that started at 4 ("tw" again, then more) after one cut short: its overlap is not read again
    put(fake_gcs, run, chunk_name("stdout", 4), b"two\nthree\n")
    put(fake_gcs, run, chunk_name("stderr", 0), b"err\n")
    assert storage.read_new(client, run, cursor) == {"stdout": b"o\nthree\n", "stderr": b"err\n"}
    # a chunk past a gap (bytes not staged yet) waits until the gap is filled
    put(fake_gcs, run, chunk_name("stdout", 20), b"later\n")
    assert storage.read_new(client, run, cursor) == {}
    put(fake_gcs, run, chunk_name("stdout", 14), b"four\n\n")
    assert storage.read_new(client, run, cursor) == {"stdout": b"four\n\nlater\n"}


def test_the_follower_gives_whole_lines_once_and_follows_a_requeued_job(client, fake_gcs):
    follower = storage.OutputFollower(client, TASK, "7")
    assert follower.poll() == []  # nothing staged yet
    first = StagingLocation(STAGING_BUCKET, f"{TASK.prefix}/try-1").for_job("7", 0)
    put(fake_gcs, first, chunk_name("stdout", 0), b"epoch 1\nepo")
    put(
        fake_gcs, StagingLocation(STAGING_BUCKET, f"{TASK.prefix}/try-1").for_job("8", 0), "stdout/000000000000", b"x\n"
    )
    assert follower.poll() == [("stdout", "epoch 1")]  # another job's output is not this job's
    put(fake_gcs, first, chunk_name("stdout", 11), b"ch 2\n")
    assert follower.poll() == [("stdout", "epoch 2")]
    # requeued: its run 1 writes afresh; the follower says so and reads it from its start
    again = StagingLocation(STAGING_BUCKET, f"{TASK.prefix}/try-1").for_job("7", 1)
    put(fake_gcs, again, chunk_name("stdout", 0), b"epoch 1 again\nno newline")
    assert follower.poll() == [
        ("", "Slurm job 7 was requeued: the output of its run 1 follows"),
        ("stdout", "epoch 1 again"),
    ]
    assert follower.flush() == [("stdout", "no newline")]


def test_a_follower_resumed_from_anothers_position_gives_only_the_lines_after_it(client, fake_gcs):
    """A trigger that replaces another (a triggerer restart) goes on where that one's lines ended: a line
    it held without its end is read again whole, none is given twice."""
    run = StagingLocation(STAGING_BUCKET, f"{TASK.prefix}/try-1").for_job("7", 0)
    put(fake_gcs, run, chunk_name("stdout", 0), b"epoch 1\nepo")
    first = storage.OutputFollower(client, TASK, "7")
    assert first.position() is None  # nothing listed yet
    assert first.poll() == [("stdout", "epoch 1")]
    position = first.position()
    assert position == {"job": "7", "try": 1, "run": 0, "offsets": {"stdout": 8, "stderr": 0}}
    put(fake_gcs, run, chunk_name("stdout", 11), b"ch 2\n")
    put(fake_gcs, run, chunk_name("stderr", 0), b"warn\n")

    second = storage.OutputFollower(client, TASK, "7")
    assert second.resume(position)
    assert sorted(second.poll()) == [("stderr", "warn"), ("stdout", "epoch 2")]
    # a position of another job, or not one at all, changes nothing
    other = storage.OutputFollower(client, TASK, "7")
    for bad in ({**position, "job": "8"}, {"job": "7"}, {**position, "offsets": {"stdout": -1}}, "7", None):
        assert not other.resume(bad)
    assert other.position() is None


def test_a_tail_reads_the_last_lines_across_chunks(client, fake_gcs):
    run = StagingLocation(STAGING_BUCKET, f"{TASK.prefix}/try-2").for_job("9")
    text = "".join(f"line {i}\n" for i in range(100)).encode()
    put(fake_gcs, run, chunk_name("stdout", 0), text[:333])
    put(fake_gcs, run, chunk_name("stdout", 333), text[333:])
    assert storage.read_tail(client, run, "stdout", 3) == "line 97\nline 98\nline 99"
    assert storage.read_tail(client, run, "stdout", 0) == ""
    assert storage.read_tail(client, run, "stderr", 5) == ""


def test_a_staged_result_is_read_only_as_the_job_published_it(client, fake_gcs):
    run = StagingLocation(STAGING_BUCKET, f"{TASK.prefix}/try-3").for_job("10")
    data = b'{"val_acc": 0.93}'
    report = StagedReport(result=(len(data), hashlib.sha256(data).hexdigest()))
    with pytest.raises(storage.StagedReadError, match="is not there"):
        storage.read_result(client, run, report, 100)
    put(fake_gcs, run, "result.json", data)
    assert storage.read_result(client, run, report, 100) == data
    with pytest.raises(storage.StagedReadError, match="the job staged no result"):
        storage.read_result(client, run, StagedReport(), 100)


def test_the_pre_submit_check_tells_a_missing_bucket_from_a_storage_that_fails_for_now(client, fake_gcs, monkeypatch):
    from airflow_provider_slurmapi.api.errors import SlurmJobSpecError, SlurmTransportError
    from airflow_provider_slurmapi.hooks import slurmapi as hooks

    hook = hooks.SlurmJobApiHook()
    hook._storage = client  # the connection's credentials are not what this test is about
    hook.check_staging(StagingLocation(STAGING_BUCKET, "ok"))
    with pytest.raises(SlurmJobSpecError, match="staging_uri: gs://no-such-bucket/x cannot be read"):
        hook.check_staging(StagingLocation("no-such-bucket", "x"))
    # a storage answering 503 past the check's retries: retryable, not the task's own mistake
    monkeypatch.setattr(hooks, "CHECK_SECONDS", 1.0)
    fake_gcs.fail_next(10**6)
    try:
        with pytest.raises(SlurmTransportError, match="nothing was submitted") as caught:
            hook.check_staging(StagingLocation(STAGING_BUCKET, "ok"))
    finally:
        fake_gcs.fail_next(0)
    assert caught.value.retryable


# -- announcements: one listing for many followers --------------------------------------------------------

ROOT = StagingLocation(STAGING_BUCKET, "unit-feed")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stage(
    fake_gcs: FakeGcs,
    run: StagingLocation,
    stream: str,
    offset: int,
    data: bytes,
    at: int | None,
    inline: bool = False,
) -> str:
    """A chunk as a job's wrapper stores it, then announces it at ``at`` (None: the announcement is lost);
    ``inline``: with its bytes in the announcement, as the wrapper does for a small chunk it stored."""
    name = run.object_name(chunk_name(stream, offset))
    fake_gcs.write(STAGING_BUCKET, name, data)
    if at is not None:
        metadata = inline_metadata(data) if inline else None
        fake_gcs.write(STAGING_BUCKET, announcement_name(ROOT, at, name), b"", metadata)
    return name


def test_a_feed_lists_each_announcement_once_from_shortly_before_the_newest_on(client, fake_gcs):
    clock = Clock(2_000_000_000)
    feed = storage.ChangeFeed(ROOT, clock)
    run = ROOT.for_task("d", "t", "r", -1, 1).for_job("7")
    stage(fake_gcs, run, "stdout", 0, b"old\n", 2_000_000_000 - storage.CHANGES_WINDOW - 5)
    first = stage(fake_gcs, run, "stdout", 4, b"a\n", 2_000_000_000 - 10)
    fake_gcs.write(STAGING_BUCKET, f"{ROOT.prefix}/.changes/2000000001/not-a-chunk", b"")  # another writer's
    assert feed.poll(client) == [(first, None)]  # the old one is before the window: its job lists it itself
    assert feed.poll(client) == []  # each once
    second = stage(fake_gcs, run, "stdout", 6, b"b\n", 2_000_000_000 + 20)
    other_node = stage(fake_gcs, run, "stderr", 0, b"c\n", 2_000_000_000 - 10)
    clock.now += 30
    assert feed.poll(client) == [(other_node, None), (second, None)]  # in the order of their times
    assert feed.floor() == 2_000_000_000 + 20 - storage.CHANGES_WINDOW
    # an announcement landing late (its upload took 15 s, or its node's clock is 15 s behind) is not in the
    # next listings, which start shortly before the newest; the next sweep of the window lists it. One
    # older than the window is never listed.
    late = stage(fake_gcs, run, "stderr", 2, b"d\n", 2_000_000_000 + 20 - storage.CHANGES_WINDOW + 5)
    too_late = stage(fake_gcs, run, "stderr", 4, b"e\n", 2_000_000_000 + 20 - storage.CHANGES_WINDOW - 1)
    just_late = stage(fake_gcs, run, "stderr", 6, b"g\n", 2_000_000_000 + 20 - storage.CHANGES_RECENT)
    assert feed.poll(client) == [(just_late, None)]  # within a second or two: in the next listing
    clock.now += storage.CHANGES_WINDOW - 1
    assert feed.poll(client) == []
    clock.now += 1
    assert feed.poll(client) == [(late, None)]
    assert (too_late, None) not in feed.poll(client)
    # a node clock ahead of this host's does not move the window past this host's time
    stage(fake_gcs, run, "stdout", 8, b"f\n", 2_000_000_000 + 3600)
    feed.poll(client)
    assert feed.floor() == int(clock.now) - storage.CHANGES_WINDOW


def test_a_fed_follower_lists_only_what_it_was_not_told_of(client, fake_gcs):
    clock = Clock(100.0)
    location = ROOT.for_task_instance("d", "fed", "r", -1)
    run = ROOT.for_task("d", "fed", "r", -1, 1).for_job("7")
    stage(fake_gcs, run, "stdout", 0, b"one\n", 1)  # staged before the trigger started: the feed will not tell
    follower = storage.OutputFollower(client, location, "7", announced=True, clock=clock)
    before = len(fake_gcs.requests_seen())
    assert follower.poll() == [] and follower.idle()  # told of nothing: nothing listed, no request
    assert fake_gcs.requests_seen()[before:] == []

    # The first chunk it is told of does not start where it is: the job staged before the feed listened,
    # so it lists at once (not a minute later) and reads both.
    two = stage(fake_gcs, run, "stdout", 4, b"two\n", 2)
    follower.announce([two, run.object_name("result.json"), "unit-feed/d/other/r/-1/try-1/7/run-0/stdout/000000000000"])
    assert follower.poll() == [("stdout", "one"), ("stdout", "two")]
    requests = fake_gcs.requests_seen()[before:]
    assert sum(1 for method, path in requests if method == "GET" and "prefix=" in path) == 1

    before = len(fake_gcs.requests_seen())
    assert follower.poll() == [] and follower.poll() == []
    assert fake_gcs.requests_seen()[before:] == []  # nothing new: no request at all

    three = stage(fake_gcs, run, "stdout", 8, b"three\n", 3)
    follower.announce([three])
    before = len(fake_gcs.requests_seen())
    assert follower.poll() == [("stdout", "three")]
    requests = fake_gcs.requests_seen()[before:]
    assert len(requests) == 1 and "prefix=" not in requests[0][1]  # one read of the new chunk, no listing

    # an announcement lost: the next chunk waits past the gap, then the follower lists once and reads both
    stage(fake_gcs, run, "stdout", 14, b"four\n", None)
    five = stage(fake_gcs, run, "stdout", 19, b"five\n", 4)
    follower.announce([five])
    assert follower.poll() == []
    clock.now += storage.GAP_RELIST_SECONDS - 1
    assert follower.poll() == []
    clock.now += 1
    assert follower.poll() == [("stdout", "four"), ("stdout", "five")]
    # the job's end with no report of what it staged lists once more: a last chunk whose announcement was
    # lost is read
    stage(fake_gcs, run, "stderr", 0, b"bye", None)
    assert follower.poll(ended=True) == [] and follower.flush() == [("stderr", "bye")]


def test_a_small_chunks_bytes_come_with_its_announcement_and_no_object_is_read(client, fake_gcs):
    """The listing of the announcements delivers each small chunk's bytes: the follower logs its lines
    without reading the chunk, while a chunk too large to carry is read by name as before."""
    clock = Clock(2_000_000_000)
    feed = storage.ChangeFeed(StagingLocation(STAGING_BUCKET, "unit-feed"), clock)
    location = ROOT.for_task_instance("d", "inline", "r", -1)
    run = ROOT.for_task("d", "inline", "r", -1, 1).for_job("11")
    follower = storage.OutputFollower(client, location, "11", announced=True)
    assert follower.poll() == []
    feed.poll(client)  # what other tests announced in the window
    one = stage(fake_gcs, run, "stdout", 0, b"epoch 1 loss 0.5\nepoch 2", 2_000_000_000, inline=True)
    big = b"x" * INLINE_LIMIT + b"\n"
    two = stage(fake_gcs, run, "stdout", 24, b" loss 0.4\n" + big, 2_000_000_000, inline=True)
    three = stage(fake_gcs, run, "stdout", 34 + len(big), b"epoch 3\n", 2_000_000_001, inline=True)
    before = len(fake_gcs.requests_seen())
    found = dict(feed.poll(client))
    assert found[one] == b"epoch 1 loss 0.5\nepoch 2" and found[two] is None and found[three] == b"epoch 3\n"
    follower.announce([(one, found[one])])
    assert follower.poll() == [("stdout", "epoch 1 loss 0.5")]
    requests = fake_gcs.requests_seen()[before:]
    assert len(requests) == 1 and ".changes" in requests[0][1]  # the listing only: no chunk was read
    follower.announce([(two, found[two]), (three, found[three])])
    before = len(fake_gcs.requests_seen())
    assert follower.poll() == [("stdout", "epoch 2 loss 0.4"), ("stdout", big[:-1].decode()), ("stdout", "epoch 3")]
    requests = fake_gcs.requests_seen()[before:]
    assert len(requests) == 1 and "stdout%2F000000000024" in requests[0][1]  # the large one, by name


def test_an_announcements_bytes_that_do_not_match_its_chunk_are_not_taken(client, fake_gcs):
    """Anyone who may write to the bucket may announce anything (as they may write a chunk): bytes that
    are not a chunk's (not base64, a size that does not match) are left out and the chunk's object is
    read; a listing of the job's prefix that gives another size than the announcement wins over it."""
    clock = Clock(2_000_000_100)
    feed = storage.ChangeFeed(StagingLocation(STAGING_BUCKET, "unit-feed"), clock)
    feed.poll(client)  # what other tests announced in the window
    location = ROOT.for_task_instance("d", "forged", "r", -1)
    run = ROOT.for_task("d", "forged", "r", -1, 1).for_job("12")
    name = run.object_name(chunk_name("stdout", 0))
    fake_gcs.write(STAGING_BUCKET, name, b"real\n")
    forged = {"n": "6", "d0": "Zm9yZ2VkCg"}  # "forged\n" is 7 bytes, not 6
    fake_gcs.write(STAGING_BUCKET, announcement_name(ROOT, 2_000_000_100, name), b"", forged)
    fake_gcs.write(STAGING_BUCKET, announcement_name(ROOT, 2_000_000_101, name), b"", {"n": "5", "d0": "!!!"})
    assert [item for item in feed.poll(client) if item[0] == name] == [(name, None), (name, None)]
    follower = storage.OutputFollower(client, location, "12", announced=True)
    follower.poll()
    follower._list()  # listed: the object's own size (5) is known
    follower.announce([(name, b"forged")])  # 6 bytes: not the listed chunk's
    assert follower.poll() == [("stdout", "real")]


def test_a_fed_follower_told_of_nothing_for_a_minute_lists_once(client, fake_gcs):
    """A trigger that started after its job staged something, the job silent since: what it staged is
    looked for once, a minute after the first poll, not left to the job's end."""
    clock = Clock(0.0)
    location = ROOT.for_task_instance("d", "quiet", "r", -1)
    run = ROOT.for_task("d", "quiet", "r", -1, 1).for_job("8")
    stage(fake_gcs, run, "stdout", 0, b"early\n", 1)
    follower = storage.OutputFollower(client, location, "8", announced=True, clock=clock)
    before = len(fake_gcs.requests_seen())
    assert follower.poll() == []
    clock.now += storage.GAP_RELIST_SECONDS - 1
    assert follower.idle() and fake_gcs.requests_seen()[before:] == []
    clock.now += 1
    assert not follower.idle()
    assert follower.poll() == [("stdout", "early")]
    assert follower.idle()
    clock.now += 10 * storage.GAP_RELIST_SECONDS  # listed once: never again for quiet
    assert follower.idle() and follower.poll() == []
    assert sum(1 for _, path in fake_gcs.requests_seen()[before:] if "prefix=" in path) == 1


def test_a_chunk_announced_after_it_was_read_is_not_read_again(client, fake_gcs):
    location = ROOT.for_task_instance("d", "again", "r", -1)
    run = ROOT.for_task("d", "again", "r", -1, 1).for_job("9")
    one = stage(fake_gcs, run, "stdout", 0, b"one\n", 5)
    follower = storage.OutputFollower(client, location, "9", announced=True)
    follower.announce([one])
    assert follower.poll() == [("stdout", "one")]
    follower.announce([one, one])
    before = len(fake_gcs.requests_seen())
    assert follower.poll() == []
    assert fake_gcs.requests_seen()[before:] == []


def test_a_fed_follower_is_idle_only_when_a_poll_would_find_nothing(client, fake_gcs):
    clock = Clock(0.0)
    location = ROOT.for_task_instance("d", "idle", "r", -1)
    run = ROOT.for_task("d", "idle", "r", -1, 1).for_job("4")
    follower = storage.OutputFollower(client, location, "4", announced=True, clock=clock)
    assert follower.idle()  # told of nothing: a poll would find nothing, without a request
    assert follower.poll() == []
    assert follower.idle()
    later = stage(fake_gcs, run, "stdout", 3, b"b\n", 1)
    follower.announce([later])
    assert not follower.idle()  # told of a chunk
    assert follower.poll() == []  # past a gap (the chunk at 0 was not staged): listed at once, still there
    assert not follower.idle()  # the gap is timed by polls
    assert not storage.OutputFollower(client, location, "4").idle()  # alone, it lists every poll


def test_the_triggers_of_a_loop_share_one_listing_and_each_hears_only_of_its_own_chunks(client, fake_gcs):
    import asyncio

    from airflow_provider_slurmapi.triggers.changes import SharedChangeFeed

    first_run = ROOT.for_task("d", "first", "r", -1, 1).for_job("21")
    second_run = ROOT.for_task("d", "second", "r", 3, 2).for_job("22")

    async def main() -> None:
        made: list[threading.Thread] = []

        def make_client() -> Any:  # blocking in a triggerer (the connection, credentials): never on the loop
            made.append(threading.current_thread())
            return client

        feed = SharedChangeFeed.get("conn", ROOT, 60.0, make_client)
        assert SharedChangeFeed.get("conn", ROOT, 5.0, make_client) is feed and feed.interval == 5.0
        assert made == []
        first = storage.OutputFollower(client, ROOT.for_task_instance("d", "first", "r", -1), "21", announced=True)
        second = storage.OutputFollower(client, ROOT.for_task_instance("d", "second", "r", 3), "22", announced=True)
        feed.subscribe(first)
        feed.subscribe(second)
        now = int(__import__("time").time())
        mine = stage(fake_gcs, first_run, "stdout", 0, b"a\n", now)
        theirs = stage(fake_gcs, second_run, "stdout", 0, b"b\n", now)

        def listings() -> int:
            return sum(1 for _, path in fake_gcs.requests_seen() if "prefix=unit-feed%2F.changes%2F" in path)

        before = listings()  # other tests' listings of the same location
        await asyncio.gather(*(feed.refresh() for _ in range(10)))  # ten triggers polling at once
        assert listings() == before + 1  # one listing for all
        assert list(first.inbox) == [(mine, None)] and list(second.inbox) == [(theirs, None)]
        assert len(made) == 1 and made[0] is not threading.main_thread()
        await feed.refresh()  # within the interval: no listing
        assert listings() == before + 1
        feed.unsubscribe(first)
        assert SharedChangeFeed._registry.get(feed.key) is feed
        feed.unsubscribe(second)
        assert feed.key not in SharedChangeFeed._registry  # the last to leave drops it

    asyncio.run(main())


def test_the_feed_lists_on_its_own_and_wakes_only_the_triggers_it_told_of_new_chunks(client, fake_gcs):
    """A trigger whose job printed nothing new is not woken: the feed's task lists once per interval and
    calls ``on_news`` of each follower it handed chunks to, once per listing however many chunks."""
    import asyncio

    from airflow_provider_slurmapi.triggers.changes import SharedChangeFeed

    run = ROOT.for_task("d", "woken", "r", -1, 1).for_job("23")

    async def main() -> None:
        feed = SharedChangeFeed.get("conn-woken", ROOT, 0.2, lambda: client)
        woken = storage.OutputFollower(client, ROOT.for_task_instance("d", "woken", "r", -1), "23", announced=True)
        quiet = storage.OutputFollower(client, ROOT.for_task_instance("d", "quiet2", "r", -1), "24", announced=True)
        news: dict[str, int] = {"woken": 0, "quiet": 0}
        told = asyncio.Event()

        def wake(name: str) -> None:
            news[name] += 1
            told.set()

        woken.on_news, quiet.on_news = (lambda: wake("woken")), (lambda: wake("quiet"))
        feed.subscribe(woken)
        feed.subscribe(quiet)
        now = int(__import__("time").time())
        one = stage(fake_gcs, run, "stdout", 0, b"a\n", now, inline=True)
        two = stage(fake_gcs, run, "stdout", 2, b"b\n", now, inline=True)
        await asyncio.wait_for(told.wait(), 30)  # nobody asked: the feed's own task listed
        assert news == {"woken": 1, "quiet": 0}
        assert woken.poll() == [("stdout", "a"), ("stdout", "b")] and {one, two} <= woken.done
        feed.unsubscribe(woken)
        feed.unsubscribe(quiet)
        assert feed._task is None and feed.key not in SharedChangeFeed._registry

    asyncio.run(main())


def test_a_trigger_whose_poll_failed_does_not_poll_again_before_its_poll_interval(client, fake_gcs):
    """A listing that keeps failing (the storage down) is due at once by the follower's account; the
    trigger tries again a poll interval later, not in a loop."""
    import asyncio
    import time

    from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger, _Follow

    trigger = SlurmJobTrigger(job_id=27, poll_interval=7, staging_uri=ROOT.uri, staging_root=ROOT.uri)
    follow = _Follow(trigger, None, "27", feed=object(), positions=None)  # type: ignore[arg-type]
    assert follow.due_in() == 7  # nothing followed yet: every poll interval
    follow.follower = storage.OutputFollower(
        client, ROOT.for_task_instance("d", "fails", "r", -1), "27", announced=True
    )
    follow.follower.list_due = True
    assert follow.due_in() == 0
    fake_gcs.fail_next(10**6, status=403)
    before = time.monotonic()
    try:
        asyncio.run(follow(False))  # its listing refused: logged, and the wait goes on
    finally:
        fake_gcs.fail_next(0)
    assert follow.failed_at is not None and follow.failed_at >= before
    assert 6 < (follow.due_in() or 0) <= 7
    asyncio.run(follow(False))  # the storage answers again
    assert follow.failed_at is None and follow.due_in() is None


def test_a_poll_that_needs_no_request_is_made_offline_and_one_that_does_is_left_to_a_poll(client, fake_gcs):
    """What the trigger runs on its event loop: lines of chunks that came with their bytes; a chunk
    announced by name only, or a listing wanted, makes ``poll_offline`` give None having read nothing."""
    location = ROOT.for_task_instance("d", "offline", "r", -1)
    run = ROOT.for_task("d", "offline", "r", -1, 1).for_job("26")
    follower = storage.OutputFollower(client, location, "26", announced=True)
    before = len(fake_gcs.requests_seen())
    assert follower.poll_offline() == []
    follower.announce([(stage(fake_gcs, run, "stdout", 0, b"one\ntw", 1), b"one\ntw")])
    assert follower.poll_offline() == [("stdout", "one")]
    follower.announce([(stage(fake_gcs, run, "stdout", 6, b"o\n", 2), b"o\n")])
    follower.announce([stage(fake_gcs, run, "stdout", 8, b"three\n", 3)])  # too large to carry, say
    assert follower.poll_offline() is None  # one of them needs a read: none was taken
    assert fake_gcs.requests_seen()[before:] == []  # no request so far
    assert follower.poll() == [("stdout", "two"), ("stdout", "three")]
    reads = [path for _, path in fake_gcs.requests_seen()[before:] if "alt=media" in path]
    assert len(reads) == 1 and "stdout%2F000000000008" in reads[0]  # the one read

    # A trigger that began after its job had staged: the first chunk it is told of is past where it is. The
    # lines it can have are not read past the gap; the listing is left to the next poll, due at once.
    late = storage.OutputFollower(client, ROOT.for_task_instance("d", "offline", "r", -1), "26", announced=True)
    assert late.poll_offline() == []
    late.announce([(stage(fake_gcs, run, "stdout", 14, b"four\n", 4), b"four\n")])
    assert late.poll_offline() == [] and late.due_in() == 0 and not late.idle()
    assert late.poll_offline() is None
    assert late.poll() == [("stdout", "one"), ("stdout", "two"), ("stdout", "three"), ("stdout", "four")]
    assert late.due_in() is None and late.idle()


def test_a_fed_follower_is_due_to_poll_by_itself_only_for_a_gap_or_a_quiet_job(client, fake_gcs):
    clock = Clock(0.0)
    location = ROOT.for_task_instance("d", "due", "r", -1)
    run = ROOT.for_task("d", "due", "r", -1, 1).for_job("25")
    assert storage.OutputFollower(client, location, "25").due_in() == 0  # alone: it lists every poll
    follower = storage.OutputFollower(client, location, "25", announced=True, clock=clock)
    assert follower.due_in() is None  # never polled: the trigger polls it when the job runs
    follower.poll()
    assert follower.due_in() == storage.GAP_RELIST_SECONDS  # quiet: looked for once, a minute on
    follower.announce([(stage(fake_gcs, run, "stdout", 0, b"a\n", 1), b"a\n")])
    follower.poll()
    assert follower.due_in() is None  # told of its chunks from the start: only news wakes it
    follower.announce([(stage(fake_gcs, run, "stdout", 9, b"late\n", 2), b"late\n")])  # past a gap
    follower.poll()
    clock.now += 20
    assert follower.due_in() == storage.GAP_RELIST_SECONDS - 20
    clock.now += storage.GAP_RELIST_SECONDS
    assert follower.due_in() == 0


def test_an_announcement_of_a_chunk_that_is_not_there_holds_the_follower_once_only(client, fake_gcs):
    """Anyone who may write to the bucket may announce anything: a chunk that does not exist costs one
    listing of the job's prefix, then it is forgotten (no listing a minute for the rest of the job)."""
    clock = Clock(0.0)
    location = ROOT.for_task_instance("d", "bogus", "r", -1)
    run = ROOT.for_task("d", "bogus", "r", -1, 1).for_job("5")
    follower = storage.OutputFollower(client, location, "5", announced=True, clock=clock)
    before = len(fake_gcs.requests_seen())
    follower.announce([run.object_name(chunk_name("stdout", 10**9))])  # never staged
    assert follower.poll() == [] and follower.idle()  # never listed: listed at once, the chunk is not there
    follower.announce([stage(fake_gcs, run, "stdout", 0, b"one\n", 1)])
    assert follower.poll() == [("stdout", "one")]
    follower.announce([run.object_name(chunk_name("stdout", 10**9))])  # again, once listed
    assert follower.poll() == [] and not follower.idle()
    clock.now += storage.GAP_RELIST_SECONDS
    assert follower.poll() == []  # listed once more: the chunk is not there
    assert follower.idle()
    assert sum(1 for _, path in fake_gcs.requests_seen()[before:] if "prefix=" in path) == 2


def listings_of(fake_gcs: FakeGcs, location: StagingLocation, since: int) -> int:
    """How many listings of ``location``'s objects were made after the first ``since`` requests."""
    prefix = location.object_name("").replace("/", "%2F")
    return sum(1 for method, path in fake_gcs.requests_seen()[since:] if method == "GET" and f"prefix={prefix}" in path)


def test_a_follower_told_of_the_jobs_chunks_from_its_start_lists_only_when_its_report_says_it_missed_some(
    client, fake_gcs
):
    """A trigger told of every chunk from the job's first never lists the job's objects, not even at the end,
    when the job's report of what it staged shows everything was read."""
    location = ROOT.for_task_instance("d", "fromstart", "r", -1)
    run = ROOT.for_task("d", "fromstart", "r", -1, 1).for_job("31")
    follower = storage.OutputFollower(client, location, "31", announced=True)
    before = len(fake_gcs.requests_seen())
    follower.announce([stage(fake_gcs, run, "stdout", 0, b"one\n", 1)])
    assert follower.poll() == [("stdout", "one")]
    follower.announce([stage(fake_gcs, run, "stdout", 4, b"two\n", 2)])
    report = StagedReport(try_number=1, run=0, stdout=(8, 8), stderr=(0, 0))
    assert follower.poll(ended=True, report=report) == [("stdout", "two")]
    assert listings_of(fake_gcs, location, before) == 0
    assert sum(1 for _, path in fake_gcs.requests_seen()[before:] if "alt=media" in path) == 2  # a read per chunk

    # The last chunk's announcement was lost: the report says more was staged, so the end lists once.
    location = ROOT.for_task_instance("d", "lostlast", "r", -1)
    run = ROOT.for_task("d", "lostlast", "r", -1, 1).for_job("32")
    follower = storage.OutputFollower(client, location, "32", announced=True)
    before = len(fake_gcs.requests_seen())
    follower.announce([stage(fake_gcs, run, "stdout", 0, b"one\n", 1)])
    stage(fake_gcs, run, "stdout", 4, b"two\n", None)
    assert follower.poll() == [("stdout", "one")]
    assert follower.poll(ended=True, report=report) == [("stdout", "two")]
    assert listings_of(fake_gcs, location, before) == 1
    # A report of another run (the job was requeued) proves nothing of this one: it lists too.
    before = len(fake_gcs.requests_seen())
    elsewhere = StagedReport(try_number=1, run=1, stdout=(8, 8), stderr=(0, 0))
    assert follower.poll(ended=True, report=elsewhere) == []
    assert listings_of(fake_gcs, location, before) == 1


def test_the_followers_of_jobs_seen_ended_by_one_tick_share_one_listing_begun_after_it(client, fake_gcs):
    import asyncio
    import time

    from airflow_provider_slurmapi.triggers.changes import SharedChangeFeed

    run = ROOT.for_task("d", "ending", "r", -1, 1).for_job("41")

    async def main() -> None:
        feed = SharedChangeFeed.get("conn-since", ROOT, 60.0, lambda: client)
        follower = storage.OutputFollower(client, ROOT.for_task_instance("d", "ending", "r", -1), "41", announced=True)
        feed.subscribe(follower)

        def listings() -> int:
            return sum(1 for _, path in fake_gcs.requests_seen() if "prefix=unit-feed%2F.changes%2F" in path)

        await feed.refresh()
        tick = time.monotonic()  # the look that sees the job ended begins; the job's last chunk is there
        last = stage(fake_gcs, run, "stdout", 0, b"last\n", int(time.time()))
        before = listings()
        await feed.refresh()  # within the interval: not listed again, so the last chunk is not heard of
        assert listings() == before and not follower.inbox
        await asyncio.gather(*(feed.refresh(since=tick) for _ in range(5)))  # five jobs that ended
        assert listings() == before + 1 and list(follower.inbox) == [(last, None)]
        await feed.refresh(since=tick)  # a listing begun after the tick was made: none more
        assert listings() == before + 1
        feed.unsubscribe(follower)

    asyncio.run(main())
