"""Reads a long job listing for a few of its jobs, without decoding the rest: sans-IO, no sockets here.

slurmrestd's ``GET /slurm/{v}/jobs/`` answers the whole active queue (about 5.5 KB a job; no id filter in
any of v0.0.40-v0.0.45), and the poller reads it only for the few jobs that ended in a tick. Decoding
every record with :mod:`json` costs about 70 ms per 1,000 jobs on every such tick; here the listing is
only scanned (each record kept as raw bytes), each record's ``job_id`` is read alone, and only the wanted
records are decoded: about a tenth of the CPU. A :class:`~airflow_provider_slurmapi.api.envelope.Call`
asks for this with ``only_jobs``; a reply this reader does not recognise (an error, another shape) returns
None and is read the ordinary way, so errors are reported exactly as before.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec


class _Listing(msgspec.Struct):
    jobs: list[msgspec.Raw]
    # Kept as the ordinary reader would: Slurm's messages, and meta (the release, for version notices).
    errors: Any = msgspec.UNSET
    warnings: Any = msgspec.UNSET
    meta: Any = msgspec.UNSET


class _Structured(msgspec.Struct):
    status: int | str
    structuredBody: _Listing  # the API spells it so


class _Stringed(msgspec.Struct):
    status: int | str
    body: str


class _JobId(msgspec.Struct):
    job_id: Any = None


_listing = msgspec.json.Decoder(_Listing)
_structured = msgspec.json.Decoder(_Structured)
_stringed = msgspec.json.Decoder(_Stringed)
_job_id = msgspec.json.Decoder(_JobId)
_any = msgspec.json.Decoder()


def pick(listing: _Listing, wanted: Collection[str]) -> dict[str, Any]:
    """Slurm's reply with only the ``jobs`` records whose ``job_id`` is in ``wanted``."""
    jobs = []
    for raw in listing.jobs:
        if str(_job_id.decode(raw).job_id) in wanted:
            record = _any.decode(raw)
            if isinstance(record, dict):
                jobs.append(record)
    body: dict[str, Any] = {"jobs": jobs}
    for name in ("errors", "warnings", "meta"):
        value = getattr(listing, name)
        if value is not msgspec.UNSET:
            body[name] = value
    return body


def slurm_listing(content: bytes, wanted: Collection[str]) -> dict[str, Any] | None:
    """Slurm's own reply (slurmrestd answering directly), reduced to the wanted jobs; None if it is not a
    job listing."""
    try:
        return pick(_listing.decode(content), wanted)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def envelope_listing(content: bytes, wanted: Collection[str]) -> tuple[int | str, dict[str, Any]] | None:
    """A callSlurmRestApi answer's status and Slurm reply, reduced to the wanted jobs, in either reply shape
    (``structuredBody`` object, or ``body`` string); None if it is not a job listing in one of them."""
    try:  # pick() inside: a record that is not an object (no job_id to read) sends it the ordinary way
        structured = _structured.decode(content)
        return structured.status, pick(structured.structuredBody, wanted)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    try:
        stringed = _stringed.decode(content)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    body = slurm_listing(stringed.body.encode(), wanted)
    return None if body is None else (stringed.status, body)
