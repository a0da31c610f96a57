"""Which ended jobs a Slurm job watcher fires for, and where it stops: on accounting records real
slurmrestd 24.11 gave (``tests/fixtures/slurm-24.11/slurmdb_jobs.json``: jobs 1 COMPLETED ``t``,
2 CANCELLED ``long``, 3 FAILED ``f``, 5 still PENDING ``u``)."""

from __future__ import annotations

import copy

import pytest

from airflow_provider_slurmapi.api.ended import EndedJobFilter, Watermark, ahead_of, job_key
from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from tests.fixtures import recorded


def jobs() -> list[SlurmJob]:
    return [SlurmJob.from_slurmdb(r) for r in recorded("slurmdb_jobs")["jobs"]]


def ids(found: list[SlurmJob]) -> list[int]:
    return [job.job_id for job in found]


def earliest_end() -> int:
    return min(int(j.end_time.timestamp()) for j in jobs() if j.end_time and j.state.is_terminal)


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ({}, [1, 2, 3]),  # a pending job is not an ended one, whatever its record's end time
        ({"states": ["COMPLETED"]}, [1]),
        ({"states": "failed"}, [3]),
        ({"names": ["t", "f"]}, [1, 3]),
        ({"name_prefix": "lo"}, [2]),
        ({"users": "ciuser", "partitions": ["debug"], "states": ["CANCELLED", "FAILED"]}, [2, 3]),
        ({"users": ["someone-else"]}, []),
    ],
)
def test_the_filter_selects_ended_jobs_by_every_given_field(wanted, expected):
    mark = Watermark.starting(earliest_end())
    assert ids(mark.new_jobs(jobs(), EndedJobFilter.of(**wanted))) == expected


def test_a_bad_filter_names_the_field_and_the_fix():
    with pytest.raises(SlurmJobSpecError, match=r"states.*RUNNING.*Use some of .*COMPLETED"):
        EndedJobFilter.of(states=["COMPLETED", "RUNNING"])
    with pytest.raises(SlurmJobSpecError, match="names"):
        EndedJobFilter.of(names=["ok", ""])


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"users": 5}, "users"),
        ({"partitions": {"gpu": 1}}, "partitions"),
        ({"name_prefix": 7}, "name_prefix"),
        ({"name_prefix": ["train-"]}, "name_prefix"),
        ({"settle": 1e15}, "settle"),
        ({"poll_interval": 10**9}, "poll_interval"),
    ],
    ids=repr,
)
def test_the_event_trigger_refuses_arguments_of_the_wrong_type_or_size_when_built(arguments, field):
    """In the DAG file, naming the field (a bad type raised a bare TypeError, or matched nothing, later)."""
    from airflow_provider_slurmapi.triggers.events import SlurmJobEventTrigger

    with pytest.raises(SlurmJobSpecError, match=f"^{field}: "):
        SlurmJobEventTrigger(**arguments)


def test_each_job_fires_once_and_a_late_arrival_within_the_settle_window_still_fires():
    everything = jobs()
    first, cancelled, failed = sorted((j for j in everything if j.state.is_terminal), key=lambda j: j.job_id)
    start = int(first.end_time.timestamp())  # type: ignore[union-attr]
    mark = Watermark.starting(start)
    wanted = EndedJobFilter()

    # Poll 1 sees only job 1 (slurmdbd has not recorded the others yet).
    assert ids(mark.new_jobs([first], wanted)) == [1]
    mark.advance(polled_at=start + 5, settle=300)
    # Poll 2 sees all three: 1 is not fired again; 2 and 3, which ended before poll 1, are.
    assert ids(mark.new_jobs(everything, wanted)) == [2, 3]
    mark.advance(polled_at=start + 10, settle=300)
    assert mark.new_jobs(everything, wanted) == []
    # Once the window has passed them, they are forgotten, and too old to fire.
    mark.advance(polled_at=int(failed.end_time.timestamp()) + 301, settle=300)  # type: ignore[union-attr]
    assert mark.fired == {} and mark.new_jobs(everything, wanted) == []
    assert cancelled.state.base == "CANCELLED"


def test_a_job_that_ends_in_the_second_the_watcher_starts_is_its_own():
    (first,) = [j for j in jobs() if j.job_id == 1]
    end = first.end_time.timestamp()  # type: ignore[union-attr]
    # Slurm records whole seconds: a watcher started 0.7 s into the job's end second still takes it.
    mark = Watermark.starting(end + 0.7)
    assert ids(mark.new_jobs([first], EndedJobFilter())) == [1]


def test_a_reused_job_id_that_ends_again_is_a_new_job():
    (first,) = [j for j in jobs() if j.job_id == 1]
    record = copy.deepcopy(first.raw)
    record["time"]["end"] += 3600
    reused = SlurmJob.from_slurmdb(record)
    assert job_key(first) != job_key(reused)
    mark = Watermark.starting(first.end_time.timestamp())  # type: ignore[union-attr]
    assert ids(mark.new_jobs([first, reused], EndedJobFilter())) == [1, 1]


def test_the_stored_watermark_round_trips_and_junk_starts_afresh():
    mark = Watermark.starting(earliest_end())
    mark.new_jobs(jobs(), EndedJobFilter())
    again = Watermark.from_dict(mark.as_dict())
    assert again == mark and again.new_jobs(jobs(), EndedJobFilter()) == []
    junks: list[object] = [None, "x", {"after": "yesterday"}, {"fired": {}}]
    for junk in junks:
        assert Watermark.from_dict(junk) is None


def test_each_filter_keeps_its_own_watermark():
    assert EndedJobFilter.of(names="a").digest() != EndedJobFilter.of(names="b").digest()
    assert EndedJobFilter.of(states="completed").digest() == EndedJobFilter.of(states=["COMPLETED"]).digest()


# -- clock skew and slurmdbd's lag (issue #31 item 12) ----------------------------------------------


def ended_at(job_id: int, end: int) -> SlurmJob:
    record = copy.deepcopy(recorded("slurmdb_jobs")["jobs"][0])  # job 1, COMPLETED
    record["job_id"], record["name"] = job_id, f"job{job_id}"
    record["time"]["end"] = end
    return SlurmJob.from_slurmdb(record)


def test_a_job_first_listed_after_the_watermark_passed_its_end_is_named_as_late():
    mark, wanted = Watermark.starting(1000), EndedJobFilter()
    on_time, late = ended_at(1, 1010), ended_at(2, 1002)
    assert ids(mark.new_jobs([on_time], wanted)) == [1]
    mark.advance(polled_at=1020, settle=5)  # after = 1015
    seen = {job_key(on_time)}
    # job 2 ended at 1002 but accounting lists it only now: it can no longer fire, and is named
    assert ids(mark.arrived_late([on_time, late], wanted, seen)) == [2]
    assert mark.new_jobs([on_time, late], wanted) == []
    # the next poll lists it again: it was seen, so it is not named twice; nor is a job the filter skips
    assert mark.arrived_late([on_time, late], wanted, {job_key(on_time), job_key(late)}) == []
    assert mark.arrived_late([late], EndedJobFilter.of(names="job1"), set()) == []


def test_a_job_that_ends_in_the_future_measures_how_far_the_clusters_clock_runs_ahead():
    assert ahead_of([ended_at(1, 1100), ended_at(2, 990)], now=1000.0) == 100.0
    assert ahead_of([ended_at(1, 990)], now=1000.0) == 0.0
    assert ahead_of([], now=1000.0) == 0.0


def test_the_watcher_warns_of_a_late_job_and_of_a_clock_ahead_once():
    import asyncio
    import logging
    import time

    from airflow_provider_slurmapi.triggers.events import EndedJobs, SlurmJobEventTrigger

    now = int(time.time())
    trigger = SlurmJobEventTrigger(poll_interval=10, settle=5)
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(f"test-watcher-{id(trigger)}")
    logger.addHandler(handler)
    trigger._log = logger  # type: ignore[assignment]  # what the trigger logs, as plain records
    first, late, future = ended_at(1, now + 1), ended_at(2, now - 30), ended_at(3, now + 600)
    snapshots = [
        EndedJobs(now + 2, now - 30, [first]),
        EndedJobs(now + 12, now - 18, [first, late]),  # job 2 listed 42 s after its end, settle is 5 s
        EndedJobs(now + 22, now - 8, [first, late, future]),  # job 3 ends 10 minutes ahead of the triggerer
        EndedJobs(now + 32, now + 2, [late, future]),
    ]

    async def fired() -> list[int]:
        async def feed():
            for snapshot in snapshots:
                yield snapshot

        return [event.payload["job_id"] async for event in trigger.filter_shared_stream(feed())]

    assert asyncio.run(fired()) == [1, 3]
    late_said = [line for line in said if "accounting listed it only now" in line]
    assert len(late_said) == 1 and "job 2 (job2) ended COMPLETED" in late_said[0] and "settle=5s" in late_said[0]
    ahead_said = [line for line in said if "clock runs ahead" in line]
    assert len(ahead_said) == 1 and "lies 578s after" in ahead_said[0], ahead_said
