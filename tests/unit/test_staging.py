"""The staging location: a gs:// URI checked before anything is sent, and each job's object names."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.staging import (
    INLINE_LIMIT,
    OBJECT_NAME_LIMIT,
    PREFIX_LIMIT,
    StagedReport,
    StagingLocation,
    announcement_name,
    chunk_name,
    inline_metadata,
    parse_announcement,
    parse_chunk,
    parse_inline,
)


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix"),
    [
        ("gs://my-bucket", "my-bucket", ""),
        ("gs://my-bucket/", "my-bucket", ""),
        ("gs://my_bucket.example.com/a/b/", "my_bucket.example.com", "a/b"),
        ("  gs://b12/airflow staging/x  ", "b12", "airflow staging/x"),
        ("gs://abc/données", "abc", "données"),
    ],
)
def test_a_valid_uri_gives_its_bucket_and_prefix(uri, bucket, prefix):
    location = StagingLocation.parse(uri)
    assert (location.bucket, location.prefix) == (bucket, prefix)
    assert location.uri == f"gs://{bucket}/{prefix}".rstrip("/")


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("s3://bucket/x", "is not a gs:// URI"),
        ("/tmp/out", "is not a gs:// URI"),
        ("gs://", "is empty"),
        ("gs://ab", "3 to 63 characters"),
        ("gs://" + "a" * 64, "3 to 63 characters"),
        ("gs://My-Bucket", "only lowercase letters"),
        ("gs://bucket name", "only lowercase letters"),
        ("gs://-bucket", "start and end with a letter or digit"),
        ("gs://bucket-", "start and end with a letter or digit"),
        ("gs://a..b.c", "start and end with a letter or digit"),
        ("gs://" + "a" * 64 + ".com", "at most 63 characters"),
        ("gs://192.168.5.4", "is an IP address"),
        ("gs://goog-data", "'goog'"),
        ("gs://my-google-bucket", "'google'"),
        ("gs://bucket/a//b", "an empty, '.' or '..' part"),
        ("gs://bucket/a/../b", "an empty, '.' or '..' part"),
        ("gs://bucket/runs/*", "'*'"),
        ("gs://bucket/runs#1", "'#'"),
        ("gs://bucket/a\nb", "'\\n'"),
        ("gs://bucket/" + "p" * (PREFIX_LIMIT + 1), f"more than {PREFIX_LIMIT}"),
    ],
)
def test_a_bad_uri_is_refused_naming_the_field_and_the_fix(uri, words):
    with pytest.raises(SlurmJobSpecError) as caught:
        StagingLocation.parse(uri, "staging_uri")
    message = str(caught.value)
    assert "staging_uri" in message and words in message, message
    assert "gs://BUCKET" in message or "Leave out" in message or "Shorten" in message


def test_a_value_that_is_not_text_is_refused():
    with pytest.raises(SlurmJobSpecError, match="is a int, not a gs:// URI"):
        StagingLocation.parse(5)


def test_each_try_of_each_task_instance_has_its_own_prefix_and_each_job_its_own_below_it():
    base = StagingLocation.parse("gs://bkt/airflow")
    first = base.for_task("train", "fit", "manual__2026-12-06T10:00:00+00:00", -1, 1)
    assert first.prefix == "airflow/train/fit/manual__2026-12-06T10%3A00%3A00%2B00%3A00/-1/try-1"
    assert base.for_task("train", "fit", "manual__2026-12-06T10:00:00+00:00", -1, 2) != first
    assert base.for_task("train", "fit", "manual__2026-12-06T10:00:00+00:00", 3, 1) != first
    job = first.for_job("123_4")
    assert job.object_uri("result.json") == f"gs://bkt/{first.prefix}/123_4/run-0/result.json"
    assert first.for_job("123_4", 1) != job
    with pytest.raises(ValueError):
        first.for_job("../124")


def test_an_id_cannot_climb_or_split_the_layout():
    base = StagingLocation.parse("gs://bkt")
    location = base.for_task("..", "a/b", ".", 0, 1)
    parts = location.prefix.split("/")
    assert parts == ["%2E%2E", "a%2Fb", "%2E", "0", "try-1"]


@given(
    dag=st.text(min_size=1, max_size=250),
    task=st.text(min_size=1, max_size=250),
    run=st.text(min_size=1, max_size=250),
    map_index=st.integers(-1, 2**31),
)
def test_every_object_name_keeps_within_cloud_storage_limits(dag, task, run, map_index):
    base = StagingLocation.parse("gs://bkt/" + "p" * PREFIX_LIMIT)
    job = base.for_task(dag, task, run, map_index, 99).for_job("4294967295_4294967295", 999)
    name = job.object_name(chunk_name("stdout", 10**12 - 1))
    assert len(name.encode("utf-8")) <= OBJECT_NAME_LIMIT
    announcement = announcement_name(base, 9_999_999_999, name)  # what the job announces it with
    assert len(announcement.encode("utf-8")) <= OBJECT_NAME_LIMIT
    assert parse_announcement(base, announcement) == (9_999_999_999, name)
    assert len(name.split("/")) == 1 + 5 + 2 + 2  # the prefix, the task instance's 5 parts, job and run, chunk


def test_chunk_names_sort_in_the_streams_order_and_read_back():
    offsets = [0, 4096, 10**6, 10**12 - 1]
    names = [chunk_name("stderr", n) for n in offsets]
    assert names == sorted(names)
    assert [parse_chunk(n) for n in names] == [("stderr", n) for n in offsets]
    assert parse_chunk("result.json") is None
    assert parse_chunk("stdout/12") is None
    assert parse_chunk("stdin/000000000000") is None
    for bad in (("stdin", 0), ("stdout", -1), ("stdout", 10**12)):
        with pytest.raises(ValueError):
            chunk_name(*bad)


def test_the_staging_report_reads_back_and_refuses_what_the_wrapper_never_writes():
    sha = "ab" * 32
    report = StagedReport.parse(f"try=2;run=1;stdout=10/12;stderr=merged;result=17:{sha};error=HTTP 503; x=y")
    assert report == StagedReport(2, 1, (10, 12), None, (17, sha), False, "HTTP 503; x=y")
    assert report is not None and not report.complete
    whole = StagedReport.parse("try=1;run=0;stdout=5/5;stderr=0/0;result=none;error=")
    assert whole is not None and whole.complete
    lost = StagedReport.parse("try=1;run=0;stdout=5/5;stderr=0/0;result=lost;error=no sha256sum")
    assert lost is not None and lost.result_lost and lost.result is None and not lost.complete
    for bad in (
        "",
        "run=0",
        "try=x;run=0;stdout=1/1",
        "try=1;run=0;stdout=1;stderr=0/0",
        f"try=1;run=0;stdout=1/1;result=17:{sha[:10]}",
    ):
        assert StagedReport.parse(bad) is None, bad


def test_a_publication_with_a_staging_report_reads_back_from_the_queue_and_from_accountings_copy():
    from airflow_provider_slurmapi.api import results

    fields = ["", "42", "ok", "0", "try=1;run=0;stdout=3/3;stderr=0/0;result=none;error=", '{"a": 1}', "out", "err"]
    comment = "airflow-ti:d/t/r/-1 try:1 " + results.MARK_STAGED + results.SEP.join(fields)
    head, published = results.split(comment)
    assert head == "airflow-ti:d/t/r/-1 try:1"
    assert published is not None and published.staged.startswith("try=1;run=0;")
    assert (published.job, published.result(), published.stdout_tail, published.stderr_tail) == (
        "42",
        {"a": 1},
        "out",
        "err",
    )
    quoted = comment.replace(results.MARK_STAGED, results.MARK_STAGED + results.QUOTED, 1).replace('"', "%22")
    assert results.split(quoted)[1] == published
    # version 3 without its report is no publication: a user's comment cannot pass for one by leaving it out
    short = (
        "airflow-ti:d/t/r/-1 try:1 " + results.MARK_STAGED + results.SEP.join(["", "42", "ok", "0", "", "{}", "", ""])
    )
    assert results.split(short)[1] is None


def test_without_staging_the_wrapper_is_what_it_was():
    from airflow_provider_slurmapi.api import results

    plain = results.wrap_script("#!/bin/sh\necho hi\n", "airflow-ti:d/t/r/-1 try:1")
    assert "slurmapi2" in plain and "slurmapi3" not in plain and "__sa_stage" not in plain and "gs://" not in plain
    staged = results.wrap_script(
        "#!/bin/sh\necho hi\n", "airflow-ti:d/t/r/-1 try:1", staging=StagingLocation.parse("gs://bkt/p"), try_number=3
    )
    assert "slurmapi3" in staged and "__sa_stage_end" in staged and "try=3;" in staged and "'bkt'" in staged


def test_the_connections_staging_uri_is_checked_naming_the_connection_and_the_field():
    from airflow_provider_slurmapi.api.connection import settings_from_extra

    cluster = {"project_id": "p", "region": "us-central1", "cluster_id": "c"}
    assert settings_from_extra(cluster).staging is None
    settings = settings_from_extra({**cluster, "staging_uri": "gs://my-staging/airflow/"}, "train")
    assert settings.staging == StagingLocation("my-staging", "airflow")
    with pytest.raises(SlurmJobSpecError, match="connection 'train' field staging_uri: bucket 'Bad'"):
        settings_from_extra({**cluster, "staging_uri": "gs://Bad/x"}, "train")


def test_the_operators_staging_arguments_are_checked_when_the_dag_is_parsed():
    from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

    base: dict[str, Any] = {"task_id": "t", "script": "#!/bin/sh\ntrue\n"}
    op = SlurmSubmitJobOperator(**base, staging_uri="", output_interval=5, max_result_bytes=2**20)
    assert op.staging_location() is None  # "": off for this task, whatever the connection says
    assert SlurmSubmitJobOperator(**base, staging_uri="gs://bkt/p").staging_location() == StagingLocation("bkt", "p")
    for bad, words in (
        ({"output_interval": 0}, "output_interval"),
        ({"output_interval": 1.5}, "output_interval"),
        ({"max_result_bytes": 0}, "max_result_bytes"),
        ({"max_result_bytes": True}, "max_result_bytes"),
    ):
        with pytest.raises(SlurmJobSpecError, match=words):
            SlurmSubmitJobOperator(**base, **bad)
    with pytest.raises(SlurmJobSpecError, match="staging_uri"):
        SlurmSubmitJobOperator(**base, staging_uri="s3://bkt").staging_location()


def test_a_staging_report_a_job_wrote_with_terminal_escapes_reads_without_them():
    """A job may write anything into its own comment: the report's error reaches the task log."""
    from airflow_provider_slurmapi.api import results

    report = "try=1;run=0;stdout=1/2;stderr=0/0;result=none;error=\x1b[2J\x07HTTP 503\x9b"
    fields = ["", "42", "none", "0", report, "", "", ""]
    published = results.split("airflow-ti:d/t/r/-1 try:1 " + results.MARK_STAGED + results.SEP.join(fields))[1]
    assert published is not None
    parsed = StagedReport.parse(published.staged)
    assert parsed is not None and parsed.error == "[2JHTTP 503"


@pytest.mark.parametrize("size", [0, 1, 2, 2999, 3000, 3001, INLINE_LIMIT])
def test_a_chunk_small_enough_travels_in_its_announcements_metadata_within_cloud_storages_limits(size):
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    metadata = inline_metadata(data)
    assert metadata is not None and parse_inline(metadata) == data
    # Cloud Storage: at most 4 KiB per value and 8 KiB of keys and values per object
    assert all(len(value) <= 4096 for value in metadata.values())
    assert sum(len(key) + len(value) for key, value in metadata.items()) <= 8192


def test_a_chunk_too_large_or_metadata_that_is_not_a_chunk_carries_no_bytes():
    assert inline_metadata(b"x" * (INLINE_LIMIT + 1)) is None
    good = inline_metadata(b"one\ntwo\n")
    assert good is not None
    for bad in [
        None,
        "n=8",
        {},
        {**good, "n": "9"},  # not its size
        {**good, "n": "-8"},
        {**good, "d0": good["d0"][:-1] + "*"},  # not base64
        {**good, "d0": ["a"]},
        {"n": str(INLINE_LIMIT + 1), "d0": "A" * 4000, "d1": "A" * 4003},  # past the limit
    ]:
        assert parse_inline(bad) is None, bad
