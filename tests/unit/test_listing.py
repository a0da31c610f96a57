"""The whole-queue listing read for a few of its jobs (api/listing.py), on real slurmrestd 24.11 replies."""

from __future__ import annotations

import json

from airflow_provider_slurmapi.api.listing import envelope_listing, slurm_listing
from tests.fixtures import recorded


def listing() -> dict:
    return recorded("jobs_list")


def test_only_the_wanted_records_are_decoded_and_slurms_messages_kept():
    body = listing()
    ids = [str(job["job_id"]) for job in body["jobs"]]
    picked = slurm_listing(json.dumps(body).encode(), {ids[1]})
    assert picked is not None and [str(j["job_id"]) for j in picked["jobs"]] == [ids[1]]
    assert picked["jobs"][0] == body["jobs"][1]  # the record as the ordinary reader reads it
    assert picked["meta"] == body["meta"] and picked["errors"] == body["errors"]
    assert slurm_listing(json.dumps(body).encode(), {"999999"})["jobs"] == []  # type: ignore[index]


def test_both_reply_shapes_of_the_api_are_read():
    body = listing()
    wanted = {str(body["jobs"][0]["job_id"])}
    structured = json.dumps({"status": 200, "structuredBody": body}).encode()
    stringed = json.dumps({"status": 200, "body": json.dumps(body)}).encode()
    for content in (structured, stringed):
        found = envelope_listing(content, wanted)
        assert found is not None and found[0] == 200 and len(found[1]["jobs"]) == 1


def test_what_is_not_a_job_listing_goes_the_ordinary_way():
    """None: the reply is read by the ordinary reader, which reports errors as it always has."""
    for content in (
        b"not json",
        json.dumps({"errors": [{"error": "x"}]}).encode(),  # no jobs at all
        json.dumps({"jobs": "many"}).encode(),
        b"[" * 100_000,  # nesting past any decoder's depth
    ):
        assert slurm_listing(content, {"1"}) is None
        assert envelope_listing(content, {"1"}) is None
    assert envelope_listing(json.dumps({"status": 200, "body": "{oops"}).encode(), {"1"}) is None
