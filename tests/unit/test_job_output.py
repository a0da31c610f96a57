"""A job's output on its pages, read back from its task's log (plugins/output.py): which lines are the job's,
and how they are paged. The whole path (a real API server reading a real triggerer's and worker's logs,
masked) is proven in tests/standalone/test_streaming.py."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_provider_slurmapi.api import storage
from airflow_provider_slurmapi.plugins.output import PAGE_LINES, LoggedOutput, job_lines
from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger


def test_only_the_jobs_own_lines_are_taken_from_the_log_in_order():
    messages = [
        SimpleNamespace(event="Submitted Slurm job 42 (train) on gpu"),
        SimpleNamespace(event="[42 stdout] epoch 1 loss=0.5"),
        SimpleNamespace(event="[43 stdout] another job's line"),
        SimpleNamespace(event="[42 stderr] warning: slow"),
        "[42 stdout] from a text log",  # Airflow 2's text lines
        SimpleNamespace(event={"not": "text"}),
        SimpleNamespace(event="[42 stdout] two lines\n[42 stdout] in one record"),
        SimpleNamespace(event="x [42 stdout] not at the start"),
        SimpleNamespace(event="[42_1 stdout] an array task's line"),
    ]
    assert job_lines(messages, "42") == [
        ("stdout", "epoch 1 loss=0.5"),
        ("stderr", "warning: slow"),
        ("stdout", "from a text log"),
        ("stdout", "two lines"),
        ("stdout", "in one record"),
    ]
    assert job_lines(messages, "42_1") == [("stdout", "an array task's line")]


def test_the_lines_a_poll_found_are_logged_in_few_records_that_the_page_reads_back_line_by_line():
    found = [("stdout", f"epoch {i} loss=0.{i}") for i in range(2000)]
    found[7:7] = [("stderr", "warning: slow"), ("", "Slurm job 42 was requeued: the output of its run 1 follows")]
    found.append(("stdout", "x" * 100_000))  # longer than a record: alone
    records = storage.logged_records("42", found, limit=4096)
    assert all(len(record) <= 4096 for record in records[:-1]) and records[-1] == "[42 stdout] " + "x" * 100_000
    assert 2002 // 200 < len(records) < 2002 // 100  # each about 4 KB of ~25-character lines: far fewer than lines
    text = "\n".join(records).splitlines()
    assert text[7:9] == ["[42 stderr] warning: slow", "Slurm job 42 was requeued: the output of its run 1 follows"]
    expected = [(stream, line) for stream, line in found if stream]
    assert job_lines([SimpleNamespace(event=record) for record in records], "42") == expected
    assert storage.logged_records("42", []) == []


def test_pages_hold_page_lines_numbered_from_one_and_a_page_past_the_end_is_the_last():
    logged = LoggedOutput(2, [("stdout", f"line {i}") for i in range(1, PAGE_LINES * 2 + 6)])
    assert logged.pages == 3
    first = logged.page(1)
    assert len(first) == PAGE_LINES and first[0] == (1, "stdout", "line 1")
    assert logged.page(3) == [(PAGE_LINES * 2 + i, "stdout", f"line {PAGE_LINES * 2 + i}") for i in range(1, 6)]
    assert logged.page(99) == logged.page(3) and logged.page(0) == first
    end = PAGE_LINES * 2 + 5
    assert logged.tail(2) == [(end - 1, "stdout", f"line {end - 1}"), (end, "stdout", f"line {end}")]
    assert LoggedOutput(1, []).pages == 1 and LoggedOutput(1, []).page(1) == []


def test_the_trigger_masks_the_values_the_task_masks_in_the_lines_it_logs():
    """A triggerer's masker knows only its own secrets: the operator passes its job's secret-looking
    environment values, and the trigger's output lines show them as *** (longest first)."""
    trigger = SlurmJobTrigger(job_id=1, staging_uri="gs://b/p", masked=["abc", "abcdef", ""])
    assert trigger.serialize()[1]["masked"] == ["abcdef", "abc"]
    assert trigger._mask("token=abcdef short=abc") == "token=*** short=***"
    assert SlurmJobTrigger(job_id=1).serialize()[1]["masked"] == []


def test_the_page_finds_each_line_as_the_worker_and_the_trigger_log_it():
    from airflow_provider_slurmapi.api.storage import logged_line

    logged = [
        logged_line("42", "stdout", "loss=0.1 [x] y"),
        logged_line("42", "", "requeued"),
        logged_line("42", "stderr", ""),
    ]
    assert job_lines(logged, "42") == [("stdout", "loss=0.1 [x] y"), ("stderr", "")]
