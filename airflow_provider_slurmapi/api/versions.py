"""What differs between Slurm REST API versions v0.0.40 .. v0.0.45, and the paths each serves.

Which Slurm serves which (slurmrestd's data parsers): 24.11 v0.0.40-v0.0.42, 25.05 v0.0.40-v0.0.43,
25.11 v0.0.41-v0.0.44, 26.05 v0.0.42-v0.0.45 (it marks v0.0.42 deprecated, for removal in 26.11).

The job endpoints have the same paths and nearly the same shapes in all of them. The differences the
provider cares about:

* v0.0.40 names its number wrappers ``uint32_no_val`` instead of ``uint32_no_val_struct``; both are
  ``{"set", "infinite", "number"}`` objects on the wire.
* up to v0.0.42 a ``/slurm`` job_info's ``standard_output`` is the expanded path; from v0.0.43 it is the
  raw pattern (``slurm-%j.out``) and ``stdout_expanded`` holds the path.
* ``/slurmdb`` records carry ``stdout`` (pattern) and ``stdout_expanded`` (path) from v0.0.41 on.
* v0.0.45 (Slurm 26.05): ``/slurmdb`` records add ``sluid`` (a lexicographically sortable unique id
  that, unlike the job id, is never reused) and ``original_sluid``, ``exclusive`` and ``oversubscribe``;
  job_info's ``shared`` is deprecated (ignored, replaced by ``oversubscribe``/``exclusive``) and its
  ``power`` and job_desc's ``power_flags`` are gone (the provider uses none of them); new paths
  ``/slurm/v0.0.45/job/{id}/requeue``, ``jobs/requeue`` and ``conf``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

SUPPORTED_VERSIONS: tuple[str, ...] = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
AUTO = "auto"
# The version a connection uses when its extra names none; why it is not auto: docs/connections/slurmapi.rst.
DEFAULT_VERSION = "v0.0.42"
# Versions Slurm has announced it removes: the release that removes each, and the first that deprecates it.
REMOVED_IN: dict[str, tuple[str, tuple[int, int]]] = {"v0.0.42": ("26.11", (26, 5))}
_VERSION_IN_PATH = re.compile(r"^/(?:slurm|slurmdb)/(v0\.0\.[0-9]+)/")

_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")


def check_version(version: str, *, allow_auto: bool = True) -> str:
    """Return ``version`` normalised (``0.0.42`` -> ``v0.0.42``), or raise naming the field."""
    value = str(version).strip()
    if allow_auto and value == AUTO:
        return AUTO
    if not value.startswith("v"):
        value = "v" + value
    if value not in SUPPORTED_VERSIONS:
        choices = ", ".join(SUPPORTED_VERSIONS)
        raise SlurmJobSpecError(
            "api_version",
            f"{version!r} is not a Slurm REST API version this provider speaks",
            f"Use one of {choices}{' or auto' if allow_auto else ''} (Slurm 24.11 serves v0.0.40-v0.0.42, "
            "26.05 v0.0.42-v0.0.45).",
        )
    return value


# Slurm's job ids (and array task ids) are 32-bit unsigned integers.
MAX_JOB_ID = 2**32 - 1


def check_job_id(job_id: object) -> str:
    """A job id as it goes into a path: a positive integer, or ``"123_4"`` for an array task."""
    if type(job_id) is str and job_id.isascii() and job_id.isdigit() and job_id.strip("0") and len(job_id) < 10:
        return job_id  # the common case (the poller's thousands of ids per tick), checked cheaply
    if isinstance(job_id, bool) or not isinstance(job_id, (int, str)):
        raise SlurmJobSpecError(
            "job_id", f"{job_id!r} is not a Slurm job id", "Pass the integer id that submit returned."
        )
    text = str(job_id).strip()
    if not _JOB_ID.fullmatch(text) or int(text.split("_")[0]) <= 0:
        raise SlurmJobSpecError(
            "job_id",
            f"{job_id!r} is not a Slurm job id",
            "Pass a positive integer such as 1234 (or '1234_5' for one task of an array).",
        )
    if any(int(part) > MAX_JOB_ID for part in text.split("_")):
        raise SlurmJobSpecError(
            "job_id",
            f"{job_id!r} is beyond Slurm's range (job ids and array task ids are 32-bit, at most {MAX_JOB_ID})",
            "Pass the id that submit returned.",
        )
    return text


def canonical_job_id(job_id: object) -> str:
    """A job id checked (:func:`check_job_id`) and spelt as Slurm spells it in replies: ``"01"``,
    ``" 1"`` and ``"1\\n"`` are ``"1"``, ``"7_03"`` is ``"7_3"``. Replies are matched on this spelling."""
    return "_".join(str(int(part)) for part in check_job_id(job_id).split("_"))


def submit_path(version: str) -> str:
    return f"/slurm/{version}/job/submit"


def job_path(version: str, job_id: object) -> str:
    return f"/slurm/{version}/job/{check_job_id(job_id)}"


def jobs_path(version: str) -> str:
    return f"/slurm/{version}/jobs/"


def jobs_state_path(version: str, job_ids: Iterable[object]) -> str:
    """The batched state query. slurmrestd 24.11 refuses a comma list (400 "Unable to parse query.")
    and an encoded one (422): the id is repeated, ``?job_id=1&job_id=2``."""
    # A checked id is digits and at most one "_": nothing to quote.
    query = "&".join("job_id=" + check_job_id(j) for j in job_ids)
    return f"/slurm/{version}/jobs/state/" + (f"?{query}" if query else "")


def ping_path(version: str) -> str:
    return f"/slurm/{version}/ping/"


def slurmdb_job_path(version: str, job_id: object) -> str:
    return f"/slurmdb/{version}/job/{check_job_id(job_id)}"


def slurmdb_jobs_path(version: str, **filters: str | list[str]) -> str:
    """Accounting's job list; a list value repeats its parameter (``step=1&step=2``), as slurmrestd wants."""
    query = urllib.parse.urlencode({k: v for k, v in filters.items() if v}, doseq=True)
    return f"/slurmdb/{version}/jobs/" + (f"?{query}" if query else "")


def output_is_pattern(version: str) -> bool:
    """True where a /slurm job_info's ``standard_output`` is the unexpanded pattern (v0.0.43+)."""
    return SUPPORTED_VERSIONS.index(version) >= SUPPORTED_VERSIONS.index("v0.0.43")


def version_of(path: str) -> str | None:
    """The REST version a Slurm path names (``/slurm/v0.0.45/jobs/`` -> ``v0.0.45``), if any."""
    match = _VERSION_IN_PATH.match(path)
    return match.group(1) if match else None


def removal_notice(version: str, release: tuple[int, int]) -> str | None:
    """What to tell a connection using ``version`` on Slurm ``release`` (major, minor) that deprecates it."""
    removed = REMOVED_IN.get(version)
    if removed is None or release < removed[1]:
        return None
    return (
        f"Slurm REST API {version} is deprecated on this cluster's Slurm {release[0]}.{release[1]:02d} and goes "
        f"away in Slurm {removed[0]}: set the connection's api_version to auto (the newest version the "
        f"cluster serves) or to {SUPPORTED_VERSIONS[-1]}."
    )
