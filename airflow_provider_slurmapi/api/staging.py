"""Where a job stages its full output and its result in Cloud Storage, and how the objects are named.

The staging location is a connection's ``staging_uri`` (or a task's own): ``gs://BUCKET`` or
``gs://BUCKET/PREFIX``. Each job writes under a prefix of its own, made of the task instance and its try
(:meth:`StagingLocation.for_task`, known before the submit) and the job's id (which only the job knows when
it runs: an array task names itself ``<array>_<task>``)::

    gs://BUCKET/PREFIX/<dag_id>/<task_id>/<run_id>/<map_index>/try-<n>/<job>/run-<r>/stdout/000000000000
                                                                                .../stderr/000000000000
                                                                                .../result.json

``run-<r>`` is Slurm's restart count (``$SLURM_RESTART_COUNT``): a requeued job runs its script again,
under the same id, and writes its output afresh.

After each chunk it stores, the job announces it with an empty object under the staging location's
``.changes/`` folder, named by the time (in whole seconds of the node's clock) and the chunk's name below
the location::

    gs://BUCKET/PREFIX/.changes/<epoch seconds, 10 digits>/<dag_id>/.../run-<r>/stdout/000000000000

So one listing of ``.changes/`` from a recent time on (``startOffset``) tells a triggerer which chunks are
new for every job it follows under that location (:class:`ChangeFeed`), however many jobs it follows and
however long they have run: a triggerer reads only what is new, not a listing per job per tick.

Each path component made from the task instance is percent-quoted past ``[A-Za-z0-9._-]``, so a run id's
``:`` and ``+`` or a ``/`` never change the layout. No Airflow imports; no I/O.

The bucket name follows Cloud Storage's rules (https://cloud.google.com/storage/docs/naming-buckets): 3-63
characters of lowercase letters, digits, ``-``, ``_`` and ``.`` (up to 222 with dots, each dot-separated part
at most 63), starting and ending with a letter or digit, not an IPv4 address, not starting with ``goog``
and not containing ``google``. Object names are at most 1,024 bytes of UTF-8 without control characters
(https://cloud.google.com/storage/docs/objects#naming); the prefix is refused ``*``, ``?``, ``[``, ``]`` and
``#`` as well, which ``gcloud storage`` reads as wildcards and generations, and ``.``/``..`` parts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

SCHEME = "gs://"
# Object names within a job's own prefix.
RESULT_OBJECT = "result.json"
STREAMS = ("stdout", "stderr")
# A chunk of a stream, named by the byte it starts at: stdout/000000000000, stdout/000000004096, ...
CHUNK_DIGITS = 12
# Cloud Storage's limit on an object name. The user's prefix takes at most PREFIX_LIMIT bytes; each part
# made from an Airflow id at most COMPONENT_LIMIT (a longer one keeps its start and a digest of the whole),
# so the longest name (512 + 3 x 114 + map index, try, an array task's id, "stdout/000001") stays below it.
OBJECT_NAME_LIMIT = 1024
PREFIX_LIMIT = 512
# The folder of the announcements below the staging location, and the digits of their time.
CHANGES = ".changes"
EPOCH_DIGITS = 10
COMPONENT_LIMIT = 114
# A chunk of at most INLINE_LIMIT bytes travels inside its announcement too, as custom metadata (base64
# without padding, in pieces of at most INLINE_PIECE characters under the keys INLINE_KEYS, and its size
# under INLINE_SIZE_KEY), so the one listing of the announcements per tick delivers it and no follower reads
# it. Cloud Storage holds at most 4 KiB per metadata value and 8 KiB per object
# (https://cloud.google.com/storage/docs/reference/rpc/google.storage.v1, ServiceConstants).
INLINE_LIMIT = 6000
INLINE_PIECE = 4000
INLINE_KEYS = ("d0", "d1")
INLINE_SIZE_KEY = "n"
_BUCKET_PART = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?")
_BUCKET_CHARS = re.compile(r"[a-z0-9._-]+")
_REFUSED_IN_PREFIX = re.compile(r"[\x00-\x1f\x7f*?\[\]#]")
_FIX = "Give gs://BUCKET or gs://BUCKET/PREFIX, e.g. gs://my-training-staging/airflow."


@dataclass(frozen=True)
class StagingLocation:
    """A checked ``gs://BUCKET/PREFIX`` (``prefix`` without leading or trailing ``/``; may be empty)."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, value: Any, field: str = "staging_uri") -> StagingLocation:
        """Check ``value``; every refusal names ``field`` and says what to give instead."""
        if not isinstance(value, str):
            raise SlurmJobSpecError(field, f"is a {type(value).__name__}, not a gs:// URI", _FIX)
        text = value.strip()
        if not text.startswith(SCHEME):
            raise SlurmJobSpecError(field, f"{text[:100]!r} is not a gs:// URI", _FIX)
        bucket, _, prefix = text[len(SCHEME) :].partition("/")
        _check_bucket(bucket, field)
        prefix = prefix.strip("/")
        _check_prefix(prefix, field)
        return cls(bucket, prefix)

    @classmethod
    def of(cls, uri: str) -> StagingLocation:
        """A location this provider made (``uri``), read back without the user-facing checks: a task
        instance's prefix may be longer than the prefix a user may give."""
        bucket, _, prefix = uri.removeprefix(SCHEME).partition("/")
        return cls(bucket, prefix.strip("/"))

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    def for_task(self, dag_id: str, task_id: str, run_id: str, map_index: int, try_number: int) -> StagingLocation:
        """The prefix of one try of one task instance, under which each of its jobs adds its own id."""
        instance = self.for_task_instance(dag_id, task_id, run_id, map_index)
        return StagingLocation(self.bucket, f"{instance.prefix}/try-{int(try_number)}")

    def for_task_instance(self, dag_id: str, task_id: str, run_id: str, map_index: int) -> StagingLocation:
        """The prefix of a task instance, whose tries' prefixes are below it (``try-<n>``)."""
        parts = [_component(dag_id), _component(task_id), _component(run_id), str(int(map_index))]
        return StagingLocation(self.bucket, "/".join(p for p in (self.prefix, *parts) if p))

    def for_job(self, job: str, run: int = 0) -> StagingLocation:
        """The prefix of one run of a job (``job``: ``123``, or an array task's ``123_4``; ``run``: how many
        times Slurm had requeued it)."""
        if not re.fullmatch(r"[0-9]+(?:_[0-9]+)?", job) or run < 0:
            raise ValueError(f"not a Slurm job id and run: {job!r}, {run!r}")
        return StagingLocation(self.bucket, f"{self.prefix}/{job}/run-{run}".lstrip("/"))

    def object_name(self, name: str) -> str:
        """The full object name of ``name`` (``result.json``, ``stdout/000001``) under this prefix."""
        return f"{self.prefix}/{name}".lstrip("/")

    def object_uri(self, name: str) -> str:
        return f"{SCHEME}{self.bucket}/{self.object_name(name)}"


def chunk_name(stream: str, offset: int) -> str:
    """The object name (below a job run's prefix) of the chunk of ``stream`` that starts at byte ``offset``.

    Chunks are named by where they start, not numbered: an upload cut short (a job cancelled while it
    uploads) and made again names the same object, so no byte is staged twice under two names, and the
    names sort in the stream's order."""
    if stream not in STREAMS or not 0 <= offset < 10**CHUNK_DIGITS:
        raise ValueError(f"no chunk of {stream!r} at {offset}")
    return f"{stream}/{offset:0{CHUNK_DIGITS}d}"


def announcement_name(root: StagingLocation, epoch: int, chunk_object: str) -> str:
    """The object name that announces the chunk ``chunk_object`` (a full object name below ``root``'s
    prefix), stored at ``epoch`` (seconds)."""
    below = root.object_name("")
    if not chunk_object.startswith(below) or not 0 <= epoch < 10**EPOCH_DIGITS:
        raise ValueError(f"no announcement of {chunk_object!r} at {epoch} below {root.uri}")
    return root.object_name(f"{CHANGES}/{epoch:0{EPOCH_DIGITS}d}/{chunk_object[len(below) :]}")


def parse_announcement(root: StagingLocation, name: str) -> tuple[int, str] | None:
    """``(epoch, chunk object name)`` of an announcement's object name below ``root``; None for any other."""
    head = root.object_name(f"{CHANGES}/")
    if not name.startswith(head):
        return None
    digits, _, below = name[len(head) :].partition("/")
    if len(digits) != EPOCH_DIGITS or not digits.isdigit() or parse_chunk("/".join(below.split("/")[-2:])) is None:
        return None
    return int(digits), root.object_name(below)


def inline_metadata(data: bytes) -> dict[str, str] | None:
    """The custom metadata that carries ``data`` inside a chunk's announcement (as the job's wrapper writes
    it); None when it is longer than :data:`INLINE_LIMIT`."""
    if len(data) > INLINE_LIMIT:
        return None
    text = base64.b64encode(data).decode("ascii").rstrip("=")
    pieces = [text[at : at + INLINE_PIECE] for at in range(0, len(text), INLINE_PIECE)] or [""]
    return {INLINE_SIZE_KEY: str(len(data)), **dict(zip(INLINE_KEYS, pieces, strict=False))}


def parse_inline(metadata: Any) -> bytes | None:
    """The chunk an announcement's custom metadata carries; None when it carries none, or anything that
    is not one (another writer's metadata: the follower then reads the chunk's object)."""
    if not isinstance(metadata, dict):
        return None
    size = metadata.get(INLINE_SIZE_KEY)
    pieces = [metadata.get(key) or "" for key in INLINE_KEYS]
    if not isinstance(size, str) or not size.isdigit() or not all(isinstance(p, str) for p in pieces):
        return None
    text = "".join(pieces)
    if int(size) > INLINE_LIMIT or len(text) > 2 * INLINE_PIECE:
        return None
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if len(data) == int(size) else None


def parse_chunk(name: str) -> tuple[str, int] | None:
    """``(stream, offset)`` of a chunk's object name below a job run's prefix; None for any other object."""
    stream, _, digits = name.partition("/")
    if stream in STREAMS and len(digits) == CHUNK_DIGITS and digits.isdigit():
        return stream, int(digits)
    return None


def _component(text: str) -> str:
    """One path component from an Airflow id: percent-quoted past ``[A-Za-z0-9._-]``, never ``.``/``..``,
    at most COMPONENT_LIMIT characters (a longer one: its first 100, ``~`` and 13 hex digits of its SHA-256)."""
    quoted = quote(str(text), safe="-._")
    if quoted in (".", ".."):
        return quoted.replace(".", "%2E")
    if len(quoted) > COMPONENT_LIMIT:
        return f"{quoted[:100]}~{hashlib.sha256(quoted.encode()).hexdigest()[:13]}"
    return quoted


def _check_bucket(bucket: str, field: str) -> None:
    def refuse(problem: str) -> SlurmJobSpecError:
        return SlurmJobSpecError(field, f"bucket {bucket[:100]!r} {problem}", _FIX)

    if not bucket:
        raise refuse("is empty")
    if not _BUCKET_CHARS.fullmatch(bucket):
        raise refuse("may hold only lowercase letters, digits, '-', '_' and '.'")
    limit = 222 if "." in bucket else 63
    if not 3 <= len(bucket) <= limit:
        raise refuse(f"must be 3 to {limit} characters long")
    if not all(_BUCKET_PART.fullmatch(part) for part in bucket.split(".")):
        raise refuse("must start and end with a letter or digit, each dot-separated part at most 63 characters")
    try:
        ipaddress.IPv4Address(bucket)
    except ValueError:
        pass
    else:
        raise refuse("is an IP address, which Cloud Storage refuses as a bucket name")
    if bucket.startswith("goog") or "google" in bucket:
        raise refuse("may not start with 'goog' or contain 'google' (Cloud Storage's rule)")


def _check_prefix(prefix: str, field: str) -> None:
    if not prefix:
        return
    found = _REFUSED_IN_PREFIX.search(prefix)
    if found:
        raise SlurmJobSpecError(
            field,
            f"prefix {prefix[:100]!r} holds {found.group()!r}",
            "Leave out control characters and * ? [ ] # (gcloud storage reads them as wildcards).",
        )
    if any(part in ("", ".", "..") for part in prefix.split("/")):
        raise SlurmJobSpecError(field, f"prefix {prefix[:100]!r} has an empty, '.' or '..' part", _FIX)
    if len(prefix.encode("utf-8")) > PREFIX_LIMIT:
        raise SlurmJobSpecError(
            field,
            f"prefix is {len(prefix.encode('utf-8'))} bytes, more than {PREFIX_LIMIT}",
            f"Shorten it: each job's objects go below it, and an object name holds at most {OBJECT_NAME_LIMIT} bytes.",
        )


# -- what a job says of its staging, in its own Slurm comment -------------------------------------------


@dataclass(frozen=True)
class StagedReport:
    """What a job's wrapper reports of its staging (the publication's ``staged`` field), e.g.
    ``try=1;run=0;stdout=2048/2048;stderr=0/0;result=17:<sha256>;error=``.

    :param try_number: the task try that submitted the job (its objects are below that try's prefix).
    :param run: the job's restart count when it ran (its objects are below ``<job>/run-<run>/``).
    :param stdout: ``(bytes staged, bytes the job wrote)``; likewise ``stderr`` (``None``: merged into stdout).
    :param result: ``(size, sha256)`` of the staged result; None when the job wrote none.
    :param error: why something was not staged (the last failure the wrapper met), "" when all was.
    :param result_lost: the job wrote a result that is not staged (``error`` says why).
    """

    try_number: int = 1
    run: int = 0
    stdout: tuple[int, int] = (0, 0)
    stderr: tuple[int, int] | None = (0, 0)
    result: tuple[int, str] | None = None
    result_lost: bool = False
    error: str = ""

    @classmethod
    def parse(cls, text: str) -> StagedReport | None:
        """The report in ``text``; None when it is not one (a field this provider did not write)."""
        fields: dict[str, str] = {}
        rest = text
        while rest:
            key, _, rest = rest.partition("=")
            if key == "error":  # the last field: it may hold anything
                fields[key], rest = rest, ""
                break
            value, _, rest = rest.partition(";")
            fields[key] = value
        try:
            try_number = int(fields["try"])
            run = int(fields["run"])
            stdout = _pair(fields["stdout"])
            stderr = None if fields.get("stderr", "merged") == "merged" else _pair(fields["stderr"])
            result_text = fields.get("result", "none")
        except (KeyError, ValueError):
            return None
        result: tuple[int, str] | None = None
        if result_text not in ("none", "lost"):
            size, _, sha = result_text.partition(":")
            if not size.isdigit() or not re.fullmatch(r"[0-9a-f]{64}", sha):
                return None
            result = (int(size), sha)
        return cls(try_number, run, stdout, stderr, result, result_text == "lost", fields.get("error", ""))

    @property
    def complete(self) -> bool:
        """Every byte of output and the result (if any) were staged."""
        streams = [self.stdout] if self.stderr is None else [self.stdout, self.stderr]
        return not self.result_lost and all(staged == total for staged, total in streams)


def _pair(text: str) -> tuple[int, int]:
    staged, _, total = text.partition("/")
    if not (staged.isdigit() and total.isdigit()):
        raise ValueError(text)
    return int(staged), int(total)


# -- the job's side: POSIX sh in the job's wrapper (api/results.py) --------------------------------------

# Each request to the metadata server or Cloud Storage is bounded (seconds); the wrapper's last pass makes
# at most a few of them, so staging delays the end of a job by a bounded time whatever the storage does.
REQUEST_SECONDS = 30
DEFAULT_OUTPUT_INTERVAL = 30

# Started once the job's id is known: the functions, then the stager, which uploads the new bytes of stdout
# and stderr every $__sa_every seconds. Writes go with `gcloud storage` where it is on the PATH (and no
# STORAGE_EMULATOR_HOST is set, which gcloud does not read), else with Cloud Storage's JSON API and an access
# token from the node's metadata server ($GCE_METADATA_HOST, else metadata.google.internal), through curl or
# python3. The token goes to curl in a header file in the job's private folder, never on a command line that
# other users of the node can read in /proc.
_STAGER = r"""
# -- staging (staging_uri): the job's output as it runs, its result at its end, to Cloud Storage --------
__sa_sb=@BUCKET@
__sa_sn=@NAME@
__sa_sq=@NAME_Q@
__sa_every=@EVERY@
__sa_cn=@CHANGES@
__sa_cq=@CHANGES_Q@
__sa_rel=@REL@
__sa_rq=@REL_Q@
__sa_run=${SLURM_RESTART_COUNT:-0}
case $__sa_run in '' | *[!0-9]*) __sa_run=0 ;; esac
__sa_sd=$__sa_dir/stage
mkdir "$__sa_sd" || __sa_fail "cannot write to $__sa_dir"
__sa_gcs=${STORAGE_EMULATOR_HOST:-https://storage.googleapis.com}
case $__sa_gcs in http://* | https://*) ;; *) __sa_gcs=http://$__sa_gcs ;; esac
__sa_gcs=${__sa_gcs%/}
__sa_md=http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/service-accounts/default/token
__sa_curl=$(command -v curl)
__sa_py=$(command -v python3)
__sa_gcloud=
[ -n "${STORAGE_EMULATOR_HOST:-}" ] || __sa_gcloud=$(command -v gcloud)
__sa_out=/proc/$__sa_pid/fd/1
__sa_err=/proc/$__sa_pid/fd/2
__sa_merged=0
[ ! "$__sa_out" -ef "$__sa_err" ] || __sa_merged=1
# What a publication before the end (the time limit's, see results.py) reports: the last pass rewrites it.
__sa_es=0/0
[ "$__sa_merged" = 0 ] || __sa_es=merged
printf 'try=@TRY@;run=%s;stdout=0/0;stderr=%s;result=none;error=' "$__sa_run" "$__sa_es" > "$__sa_sd/staged"
: > "$__sa_sd/empty"
__sa_quiet=
__sa_mg=
__sa_mj=
__sa_why() { [ -n "$__sa_quiet" ] || printf '%s' "$1" | tr -d '\000-\037\177;' | head -c 200 > "$__sa_sd/error"; }
__sa_token() {
    if [ -n "$__sa_curl" ]; then
        "$__sa_curl" -sS --max-time @SECONDS@ -H 'Metadata-Flavor: Google' -o "$__sa_sd/token" "$__sa_md" \
            2>"$__sa_sd/err" || { __sa_why "metadata server: $(cat "$__sa_sd/err")"; return 1; }
    elif [ -n "$__sa_py" ]; then
        "$__sa_py" - "$__sa_md" "$__sa_sd/token" 2>"$__sa_sd/err" <<'SLURMAPI_PY' ||
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers=dict([("Metadata-Flavor", "Google")]))
with urllib.request.urlopen(request, timeout=@SECONDS@) as reply, open(sys.argv[2], "wb") as out:
    out.write(reply.read())
SLURMAPI_PY
            { __sa_why "metadata server: $(tail -n 1 "$__sa_sd/err")"; return 1; }
    else
        __sa_why "neither curl nor python3 on the node"
        return 1
    fi
    __t=$(sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p' "$__sa_sd/token")
    rm -f "$__sa_sd/token"
    [ -n "$__t" ] || { __sa_why "the metadata server gave no access token"; return 1; }
    (umask 077 && printf 'Authorization: Bearer %s\n' "$__t" > "$__sa_sd/auth")
}
# __sa_http METHOD URL [FILE [TYPE]]: one authorized request (FILE its body, of Content-Type TYPE, else
# application/octet-stream); its status in $__sa_code, its body in $__sa_sd/reply
__sa_http() {
    if [ -n "$__sa_curl" ]; then
        if [ -n "${3:-}" ]; then
            __sa_code=$("$__sa_curl" -sS --max-time @SECONDS@ -o "$__sa_sd/reply" -w '%{http_code}' -X "$1" \
                -H "@$__sa_sd/auth" -H "Content-Type: ${4:-application/octet-stream}" --data-binary "@$3" "$2" \
                2>"$__sa_sd/err")
        else
            __sa_code=$("$__sa_curl" -sS --max-time @SECONDS@ -o "$__sa_sd/reply" -w '%{http_code}' -X "$1" \
                -H "@$__sa_sd/auth" "$2" 2>"$__sa_sd/err")
        fi
    else
        __sa_code=$("$__sa_py" - "$1" "$2" "${3:-}" "$__sa_sd" "${4:-application/octet-stream}" 2>"$__sa_sd/err" \
            <<'SLURMAPI_PY'
import sys, urllib.error, urllib.request
method, url, body, folder, kind = sys.argv[1:6]
with open(folder + "/auth") as auth:
    header = auth.read().split(":", 1)[1].strip()
data = open(body, "rb").read() if body else None
request = urllib.request.Request(url, data=data, method=method)
request.add_header("Authorization", header)
request.add_header("Content-Type", kind)
try:
    with urllib.request.urlopen(request, timeout=@SECONDS@) as reply:
        code, text = reply.status, reply.read()
except urllib.error.HTTPError as err:
    code, text = err.code, err.read()
except Exception as err:
    code, text = 0, str(err).encode()
with open(folder + "/reply", "wb") as out:
    out.write(text)
print(code)
SLURMAPI_PY
)
    fi
    case ${__sa_code:-000} in 2??) return 0 ;; esac
    __sa_why "HTTP ${__sa_code:-000} from Cloud Storage: $(head -c 120 "$__sa_sd/reply" 2>/dev/null)" \
        "$(tail -n 1 "$__sa_sd/err")"
    return 1
}
# __sa_store FILE NAME QUOTED: FILE as the object NAME (QUOTED: NAME percent-quoted), only where there is
# none yet, with the custom metadata $__sa_mg (gcloud's KEY=VALUE,...) and $__sa_mj (the same as JSON) if
# set. Returns 0 when stored, 2 when an object of that name is there already, 1 when it failed.
__sa_store() {
    if [ -n "$__sa_gcloud" ]; then
        "$__sa_gcloud" storage cp --if-generation-match=0 ${__sa_mg:+"--custom-metadata=$__sa_mg"} "$1" \
            "gs://$__sa_sb/$2" >/dev/null 2>"$__sa_sd/err" && return 0
        grep -qi 'precondition' "$__sa_sd/err" && return 2
        __sa_why "gcloud storage cp: $(tail -n 1 "$__sa_sd/err")"
        return 1
    fi
    __sa_token || return 1
    if [ -n "$__sa_mj" ]; then
        # a multipart upload (https://cloud.google.com/storage/docs/uploading-objects#uploading-an-object):
        # the object's metadata, then its content
        printf '%s\r\n%s\r\n\r\n{"metadata":%s}\r\n%s\r\n%s\r\n\r\n' --sa_part \
            'Content-Type: application/json; charset=UTF-8' "$__sa_mj" --sa_part \
            'Content-Type: application/octet-stream' > "$__sa_sd/multi" &&
            cat "$1" >> "$__sa_sd/multi" && printf '\r\n%s\r\n' --sa_part-- >> "$__sa_sd/multi" ||
            { __sa_why "cannot write to $__sa_sd"; return 1; }
        __sa_http POST "$__sa_gcs/upload/storage/v1/b/$__sa_sb/o?uploadType=multipart&ifGenerationMatch=0&name=$3" \
            "$__sa_sd/multi" 'multipart/related; boundary=sa_part' && return 0
    else
        __sa_http POST "$__sa_gcs/upload/storage/v1/b/$__sa_sb/o?uploadType=media&ifGenerationMatch=0&name=$3" \
            "$1" && return 0
    fi
    [ "$__sa_code" != 412 ] || return 2
    return 1
}
# __sa_put FILE NAME: FILE as the object NAME of this run (see __sa_store).
__sa_put() {
    __sa_store "$1" "$__sa_sn/$__sa_job/run-$__sa_run/$2" \
        "$__sa_sq%2F$__sa_job%2Frun-$__sa_run%2F$(printf '%s' "$2" | sed 's|/|%2F|g')"
}
# __sa_inline FILE: the custom metadata that carries FILE's bytes (at most @INLINE@) in its announcement:
# n=<size>, d0 and d1 its base64 (no padding) in pieces of at most @PIECE@ characters (see inline_metadata),
# in $__sa_mg and $__sa_mj; both empty for a longer FILE or a node with neither base64 nor python3.
__sa_inline() {
    __sa_mg= __sa_mj=
    __n=$(wc -c < "$1" | tr -d ' ')
    case $__n in '' | *[!0-9]*) return 0 ;; esac
    [ "$__n" -le @INLINE@ ] || return 0
    if command -v base64 >/dev/null 2>&1; then
        __b=$(base64 < "$1" | tr -d '\n=') || return 0
    elif [ -n "$__sa_py" ]; then
        __b=$("$__sa_py" -c 'import base64, sys
print(base64.b64encode(open(sys.argv[1], "rb").read()).decode().rstrip("="))' "$1") || return 0
    else
        return 0
    fi
    __d0=$(printf '%s\n' "$__b" | cut -c 1-@PIECE@)
    __d1=$(printf '%s\n' "$__b" | cut -c @PIECE_NEXT@-)
    __sa_mg="n=$__n,d0=$__d0" __sa_mj="{\"n\":\"$__n\",\"d0\":\"$__d0\""
    [ -z "$__d1" ] || __sa_mg="$__sa_mg,d1=$__d1" __sa_mj="$__sa_mj,\"d1\":\"$__d1\""
    __sa_mj="$__sa_mj}"
}
# __sa_announce NAME [FILE]: an empty object .changes/<epoch>/<the chunk NAME of this run> below the staging
# location, which tells a triggerer that follows many jobs what is new in one listing; FILE (the chunk's
# bytes, when this job stored them) travels in it if it is small. Its failure is not the staging's: the
# chunk is staged, and a triggerer reads it at the latest when the job ends.
__sa_announce() {
    [ -n "$__sa_cn" ] || return 0
    __e=$(date +%s 2>/dev/null)
    case $__e in '' | *[!0-9]*) return 0 ;; esac
    __e=$(printf '%010d' "$__e")
    __sa_quiet=1
    [ -z "${2:-}" ] || __sa_inline "$2"
    __sa_store "$__sa_sd/empty" "$__sa_cn/$__e/$__sa_rel/$__sa_job/run-$__sa_run/$1" \
        "$__sa_cq%2F$__e%2F$__sa_rq%2F$__sa_job%2Frun-$__sa_run%2F$(printf '%s' "$1" | sed 's|/|%2F|g')"
    __sa_quiet= __sa_mg= __sa_mj=
    return 0
}
# __sa_size NAME: the size of the object NAME of this run (after a 412: a cut upload that had landed)
__sa_size() {
    __n=$__sa_sn/$__sa_job/run-$__sa_run/$1
    if [ -n "$__sa_gcloud" ]; then
        "$__sa_gcloud" storage objects describe "gs://$__sa_sb/$__n" --format='value(size)' 2>"$__sa_sd/err"
        return
    fi
    __sa_token || return 1
    __q=$__sa_sq%2F$__sa_job%2Frun-$__sa_run%2F$(printf '%s' "$1" | sed 's|/|%2F|g')
    __sa_http GET "$__sa_gcs/storage/v1/b/$__sa_sb/o/$__q?fields=size" || return 1
    sed -n 's/.*"size" *: *"\{0,1\}\([0-9]*\).*/\1/p' "$__sa_sd/reply"
}
# __sa_stream STREAM FILE: stage what FILE holds past what is staged already, as chunks named by offset
__sa_stream() {
    [ -f "$2" ] || return 0
    __off=$(cat "$__sa_sd/$1.off" 2>/dev/null) || __off=0
    __size=$(wc -c < "$2" | tr -d ' ')
    while [ "$__size" -gt "$__off" ]; do
        __name=$1/$(printf '%012d' "$__off")
        tail -c +$((__off + 1)) "$2" | head -c $((__size - __off)) > "$__sa_sd/chunk"
        __sa_put "$__sa_sd/chunk" "$__name"
        case $? in
        0)
            __off=$((__off + $(wc -c < "$__sa_sd/chunk")))
            __inl=$__sa_sd/chunk
            ;;
        2)
            __inl=
            __got=$(__sa_size "$__name")
            case $__got in '' | *[!0-9]* | 0)
                __sa_why "$__name is there already, of no size this job can read"
                return 1
                ;;
            esac
            __off=$((__off + __got))
            ;;
        *) return 1 ;;
        esac
        echo "$__off" > "$__sa_sd/$1.off"
        __sa_announce "$__name" "$__inl"
    done
}
__sa_streams() {
    __sa_stream stdout "$__sa_out"
    [ "$__sa_merged" = 1 ] || __sa_stream stderr "$__sa_err"
}
__sa_sha256() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum < "$1" | cut -d ' ' -f 1
    elif [ -n "$__sa_py" ]; then
        "$__sa_py" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"
    fi
}
# The last pass, once the script has ended: the rest of the output, the result, and the report that the
# publication carries (see airflow_provider_slurmapi.api.staging.StagedReport).
__sa_stage_end() {
    __sa_streams
    __res=none
    if [ -f "$SLURMAPI_RETURN_FILE" ]; then
        __res=lost
        __sha=$(__sa_sha256 "$SLURMAPI_RETURN_FILE")
        if [ -z "$__sha" ]; then
            __sa_why "no sha256sum or python3 on the node to fingerprint the result"
        elif __sa_put "$SLURMAPI_RETURN_FILE" result.json; then
            __res=$(wc -c < "$SLURMAPI_RETURN_FILE" | tr -d ' '):$__sha
        elif [ "$?" = 2 ]; then
            __sa_why "result.json was there before the job wrote it"
        fi
    fi
    __o=$(cat "$__sa_sd/stdout.off" 2>/dev/null) || __o=0
    __ot=0
    [ ! -f "$__sa_out" ] || __ot=$(wc -c < "$__sa_out" | tr -d ' ')
    __e=$(cat "$__sa_sd/stderr.off" 2>/dev/null) || __e=0
    __et=0
    [ ! -f "$__sa_err" ] || __et=$(wc -c < "$__sa_err" | tr -d ' ')
    __es=$__e/$__et
    [ "$__sa_merged" = 0 ] || __es=merged
    printf 'try=@TRY@;run=%s;stdout=%s/%s;stderr=%s;result=%s;error=%s' "$__sa_run" "$__o" "$__ot" "$__es" "$__res" \
        "$(cat "$__sa_sd/error" 2>/dev/null)" > "$__sa_sd/staged"
}
# __sa_get NAME FILE SIZE SHA256: the object NAME of this try (an input the task staged) into FILE, checked
__sa_get() {
    __n=$__sa_sn/$1
    if [ -n "$__sa_gcloud" ]; then
        "$__sa_gcloud" storage cp "gs://$__sa_sb/$__n" "$2" >/dev/null 2>"$__sa_sd/err" ||
            { __sa_why "gcloud storage cp: $(tail -n 1 "$__sa_sd/err")"; return 1; }
    else
        __sa_token || return 1
        __q=$__sa_sq%2F$(printf '%s' "$1" | sed 's|/|%2F|g')
        __sa_http GET "$__sa_gcs/storage/v1/b/$__sa_sb/o/$__q?alt=media" || return 1
        mv "$__sa_sd/reply" "$2"
    fi
    [ "$(wc -c < "$2" | tr -d ' ')" = "$3" ] && [ "$(__sa_sha256 "$2")" = "$4" ] ||
        { __sa_why "it is not the object the task wrote (size or SHA-256 differ)"; return 1; }
}
@INPUTS@(
    trap 'kill "$__sa_sl" 2>/dev/null; exit 0' TERM
    while :; do
        sleep "$__sa_every" &
        __sa_sl=$!
        wait "$__sa_sl"
        __sa_streams
    done
) &
__sa_stager=$!
"""

# Once the script has ended: stop the stager (it ends its upload under way first), then the last pass.
_STAGER_END = """kill "$__sa_stager" 2>/dev/null
wait "$__sa_stager" 2>/dev/null
__sa_stage_end
"""


@dataclass(frozen=True)
class StagedInput:
    """An object the task staged for its job (``@task.slurm``'s arguments): its name below the try's prefix,
    its size and SHA-256, and the variable that gives the job the path of its checked local copy."""

    name: str
    size: int
    sha256: str
    variable: str


def _inputs_sh(inputs: Sequence[StagedInput], location: StagingLocation) -> str:
    lines = []
    for item in inputs:
        local = f'"$__sa_dir/{item.name}"'
        lines += [
            f"__sa_get {_sh_quote(item.name)} {local} {int(item.size)} {_sh_quote(item.sha256)} || {{",
            f"    echo {_sh_quote(f'slurmapi: cannot read {location.object_uri(item.name)}:')} "
            '"$(cat "$__sa_sd/error")" >&2',
            '    rm -rf "$__sa_dir"',
            "    exit 1",
            "}",
            f"{item.variable}={local}",
            f"export {item.variable}",
        ]
    return "".join(line + "\n" for line in lines)


def stager_script(
    location: StagingLocation,
    every: int,
    try_number: int,
    inputs: Sequence[StagedInput] = (),
    root: StagingLocation | None = None,
) -> tuple[str, str]:
    """The wrapper's two staging parts for the ``location`` of try ``try_number``: what starts the stager
    once the job's id is known (first fetching ``inputs``: a job that cannot read them fails before its
    script runs), and what ends it once the script has ended. With ``root`` (the staging location that
    ``location`` is below), the job announces each chunk it stores under ``root``'s ``.changes/``."""
    changes = below = ""
    if root is not None:
        head = root.object_name("")
        if root.bucket != location.bucket or not location.prefix.startswith(head):
            raise ValueError(f"{location.uri} is not below {root.uri}")
        changes, below = root.object_name(CHANGES), location.prefix[len(head) :]
    fields = {
        "@CHANGES@": _sh_quote(changes),
        "@CHANGES_Q@": _sh_quote(quote(changes, safe="")),
        "@REL@": _sh_quote(below),
        "@REL_Q@": _sh_quote(quote(below, safe="")),
        "@INPUTS@": _inputs_sh(inputs, location),
        "@TRY@": str(int(try_number)),
        "@BUCKET@": _sh_quote(location.bucket),
        "@NAME@": _sh_quote(location.prefix),
        "@NAME_Q@": _sh_quote(quote(location.prefix, safe="")),
        "@EVERY@": str(int(every)),
        "@SECONDS@": str(REQUEST_SECONDS),
        "@INLINE@": str(INLINE_LIMIT),
        "@PIECE@": str(INLINE_PIECE),
        "@PIECE_NEXT@": str(INLINE_PIECE + 1),
    }
    text = _STAGER
    for key, value in fields.items():
        text = text.replace(key, value)
    return text, _STAGER_END


def output_interval(value: Any) -> int:
    """The ``output_interval`` argument, checked: whole seconds from 1 to 3600."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3600:
        raise SlurmJobSpecError(
            "output_interval",
            f"{value!r} is not a number of seconds",
            f"Give an int from 1 to 3600 (default {DEFAULT_OUTPUT_INTERVAL}): how often a running job stages "
            "its new output.",
        )
    return value


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
