"""What a job publishes about itself: its result and the tail of its output, in its own Slurm comment.

slurmrestd reads no files, but a running job may update its own record (``scontrol update
JobId=$SLURM_JOB_ID Comment=...``, as the job's user), and ``GET /slurm/{v}/job/{id}`` returns that
comment while the job runs and after it ends, until it leaves the active queue (``MinJobAge``);
accounting keeps that comment only with ``AccountingStoreFlags=job_comment``. Slurm 24.11 refuses a
comment longer than :data:`COMMENT_LIMIT` bytes ("Pathname ... too long"). The job's user may also write
the job's accounting comment itself (``sacctmgr -i modify job where JobId=<id> set Comment=...``, measured
on Slurm 24.11 and 26.05 with the default ``AccountingStoreFlags``), which ``/slurmdb/{v}/job/{id}``
returns as ``comment.job`` once the job has ended: so the wrapper writes a copy there too, and the batched
accounting read that ends every wait carries it (no read of the active queue).

:func:`wrap_script` turns the user's script into a POSIX ``sh`` batch script that writes it to a file
and runs it with the interpreter of its own ``#!`` line (its exit code, signals and ``$SLURM_*``
environment unchanged), then, on any exit, appends to the job's comment (the task-instance tag first,
kept as it is) a :data:`MARK` and five fields: the job's own id (``123``, an array task ``123_4``: a
publication counts only in the record of the job it names), the state of the result file the job wrote to
``$SLURMAPI_RETURN_FILE`` (``ok``, ``none``, ``big:<bytes>``, ``nul``), the result, and the last lines of the
job's stdout and stderr, cut to what the comment holds; and the same, percent-quoted (:data:`QUOTED`),
as the job's accounting comment, when ``sacctmgr`` is on the node and ``$SLURMAPI_PUBLISH_ACCOUNTING``
is not ``0``. :func:`parse` reads either back.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.staging import DEFAULT_OUTPUT_INTERVAL, StagedInput, StagingLocation, stager_script

# slurmctld's limit on a job comment (and extra), measured on Slurm 24.11: 1024 bytes pass, 1025 fail.
COMMENT_LIMIT = 1024
# The comment's published part: " " + RS "slurmapi2" then US-separated fields (control characters that no
# valid JSON holds raw and that the wrapper strips from the tails). Version 2 names the job it is about;
# version 1 (without it) is no longer read: it could be copied into another job's record.
MARK = "\x1eslurmapi2"
# With staging on, version 3: the same fields and, after ``merged``, the staging report (StagedReport).
MARK_STAGED = "\x1eslurmapi3"
_MARK_STEM = MARK[:-1]
# What the staging report may take at most: "run=" 3 digits, two streams of two 12-digit sizes, a result's
# size and SHA-256, and 200 bytes of error.
STAGED_ROOM = 1 + len("run=999;stdout=/;stderr=/;result=:;error=") + 4 * 12 + 11 + 64 + 200
SEP = "\x1f"
DEFAULT_TAIL_LINES = 50
MAX_TAIL_LINES = 10000
# What the wrapper's fields cost beyond the head: " " + MARK + 6 separators + the longest job id (an array
# task of 32-bit ids) + the longest status.
_OVERHEAD = 1 + len(MARK) + 6 + len("4294967295_4294967295") + len("big:99999999999")
RESULT_OK, RESULT_NONE, RESULT_BIG, RESULT_NUL = "ok", "none", "big", "nul"


@dataclass(frozen=True)
class Published:
    """What a job's wrapper published: its result (as text) and the tails of its output."""

    result_status: str  # ok / none / big:<bytes> / nul (the file holds a NUL byte)
    result_text: str
    stdout_tail: str
    stderr_tail: str
    merged: bool  # stdout and stderr are one file: its tail is ``stdout_tail``
    job: str = ""  # the job the wrapper published for (``123``, ``123_4``), as it named itself
    staged: str = ""  # with staging on: its report (``StagedReport.parse`` reads it); "" without

    def as_dict(self) -> dict[str, Any]:
        fields = {
            "result_status": self.result_status,
            "result_text": self.result_text,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "merged": self.merged,
            "job": self.job,
        }
        return {**fields, "staged": self.staged} if self.staged else fields

    @classmethod
    def from_dict(cls, data: Any) -> Published | None:
        if not isinstance(data, dict):
            return None
        return cls(
            str(data.get("result_status", RESULT_NONE)),
            str(data.get("result_text", "")),
            str(data.get("stdout_tail", "")),
            str(data.get("stderr_tail", "")),
            bool(data.get("merged", False)),
            str(data.get("job", "")),
            str(data.get("staged", "")),
        )

    @property
    def has_result(self) -> bool:
        return self.result_status != RESULT_NONE

    def result(self) -> Any:
        """The job's result (parsed JSON); raises :class:`ResultError` when it is too large or not JSON."""
        if self.result_status.startswith(RESULT_BIG):
            size = self.result_status.partition(":")[2]
            raise ResultError(
                f"{RESULT_FILE_WORDS} is {size} bytes, more than its Slurm comment "
                f"holds (at most {COMMENT_LIMIT} bytes less the task's tag): write a smaller JSON value, e.g. "
                "metrics and the path of a file with the rest"
            )
        if self.result_status == RESULT_NUL:
            raise ResultError(
                f"{RESULT_FILE_WORDS} holds a NUL byte, which no JSON text holds: write JSON text (json.dump in Python)"
            )
        try:
            value = json.loads(self.result_text, parse_constant=_refuse_constant)
        except RecursionError:
            raise ResultError(f"{RESULT_FILE_WORDS} nests deeper than {MAX_RESULT_DEPTH} levels") from None
        except ValueError as err:
            raise ResultError(f"{RESULT_FILE_WORDS} is not valid JSON ({err}): {self.result_text[:200]!r}") from None
        if _depth(value) > MAX_RESULT_DEPTH:
            raise ResultError(
                f"{RESULT_FILE_WORDS} nests deeper than {MAX_RESULT_DEPTH} levels, more than an XCom holds: flatten it"
            )
        return value


# How messages name a job's result; ``@task.slurm`` names the function's return value instead.
RESULT_FILE_WORDS = "the job's result file ($SLURMAPI_RETURN_FILE)"


class ResultError(ValueError):
    """A job's published result that cannot be used: too large, or not JSON."""


# How deep a result may nest (lists and objects): Airflow's XCom serialization gives up well before
# Python's recursion limit, with an error that says nothing of the result.
MAX_RESULT_DEPTH = 64


def _refuse_constant(name: str) -> Any:
    raise ValueError(
        f"{name} is not a JSON number (NaN and Infinity are JavaScript's, not JSON's): write null or a string"
    )


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > MAX_RESULT_DEPTH:
            return deepest
        if isinstance(item, dict):
            stack.extend((inner, level + 1) for inner in item.values())
        elif isinstance(item, list):
            stack.extend((inner, level + 1) for inner in item)
    return deepest


# Accounting's copy of a publication (written with sacctmgr, which turns quotes into backticks) has these
# characters percent-quoted, and says so with the field QUOTED right after the mark.
QUOTED = "%"
_UNQUOTE = re.compile("%(25|22|27|60)")


def _unquote(text: str) -> str:
    return _UNQUOTE.sub(lambda m: chr(int(m.group(1), 16)), text)


def split(comment: str) -> tuple[str, Published | None]:
    """A comment's own part (tag, try, the user's comment) and what the job published, if anything:
    from the job's comment in the active queue, or from accounting's percent-quoted copy. Which job the
    publication names is in :attr:`Published.job`: :func:`parse` checks it."""
    # The wrapper's record is the comment's last: it strips RS and US from everything it publishes, so a
    # mark inside the submitted comment (the head) can never stand for the job's publication.
    head, mark, rest = comment.rpartition(_MARK_STEM)
    if not mark or rest[:1] not in ("2", "3"):
        return comment, None
    staged = rest[0] == "3"
    fields = rest[1:].split(SEP)
    if staged and len(fields) >= 8:
        fields, report = fields[:4] + fields[5:], fields[4]
    else:
        report = ""
    if len(fields) >= 7 and fields[0] == QUOTED:
        head, fields, report = _unquote(head), ["", *(_unquote(f) for f in fields[1:])], _unquote(report)
    if len(fields) < 7 or fields[0] != "" or (staged and not report):
        return head.rstrip(" "), None
    job, status, merged, result = _text(fields[1]), fields[2], fields[3] == "1", _text(fields[4])
    stdout, stderr = _shown(fields[5]), _shown(SEP.join(fields[6:]))
    return head.rstrip(" "), Published(status, result, stdout, stderr, merged, job, _shown(report))


# Control characters other than tab and newline (C0, DEL, C1: terminal escapes, BEL, CSI) and lone
# surrogates (a reply's "\ud800"): what a job's output may hold that a log or a page must not replay.
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _text(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate (which no UTF-8 encoder takes) becomes U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def _shown(text: str) -> str:
    """An output tail as a log may show it: no terminal escapes or other control characters."""
    return _UNSHOWN.sub(lambda m: "\ufffd" if "\ud800" <= m.group(0) <= "\udfff" else "", text)


def parse(comment: str, job: str) -> Published | None:
    """What job ``job`` (its display id: ``123``, ``123_4``) published in ``comment``; None when it
    published nothing (yet), or when the publication there names another job (:func:`foreign`)."""
    published = split(comment)[1]
    return published if published is not None and published.job == job else None


def foreign(comment: str, job: str) -> str:
    """The job a publication in job ``job``'s comment names when that is another job (written there by a
    job of the same Slurm user: not trusted), else ``""``."""
    published = split(comment)[1]
    return published.job if published is not None and published.job != job else ""


def tail_lines(value: object) -> int:
    """The ``output_tail_lines`` argument, checked: 0 (no tails) up to :data:`MAX_TAIL_LINES`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TAIL_LINES:
        raise SlurmJobSpecError(
            "output_tail_lines",
            f"{value!r} is not a number of lines",
            f"Give an int from 0 (no output tails) to {MAX_TAIL_LINES}.",
        )
    return value


def _quote(text: str) -> str:
    """``text`` as one single-quoted sh word."""
    return "'" + text.replace("'", "'\\''") + "'"


def room(comment: str, *, staged: bool = False) -> int:
    """Bytes left for the published fields after the job's own comment (and the staging report)."""
    return COMMENT_LIMIT - len(comment.encode()) - _OVERHEAD - (STAGED_ROOM if staged else 0)


def wrap_script(
    script: str,
    comment: str,
    lines: int = DEFAULT_TAIL_LINES,
    staging: StagingLocation | None = None,
    output_interval: int = DEFAULT_OUTPUT_INTERVAL,
    try_number: int = 1,
    inputs: Sequence[StagedInput] = (),
    staging_root: StagingLocation | None = None,
    warning_signal: str = "",
    forward_warning: bool = False,
) -> str:
    """The batch script that runs ``script`` unchanged and then publishes (see the module's docstring).

    ``comment`` is the job's comment as submitted (it starts with the task-instance tag); the wrapper
    writes it back first, then the published fields, so the tag is never lost. With ``staging`` (the
    location of try ``try_number``, :meth:`StagingLocation.for_task`) the job also stages its output every
    ``output_interval`` seconds and its result at its end (:mod:`airflow_provider_slurmapi.api.staging`), and
    publishes with :data:`MARK_STAGED` a report of it; without, the wrapper is what it was before staging.
    With ``staging_root`` (the location ``staging`` is below) it announces each chunk it stores there
    (:func:`~airflow_provider_slurmapi.api.staging.announcement_name`).

    ``warning_signal`` (the job's ``kill_warning_signal``, a name of
    :data:`~airflow_provider_slurmapi.api.spec.WARNING_SIGNALS`) is Slurm's warning before the time limit, which
    must not end the wrapper or its helpers: they ignore it, and while the script runs the wrapper just notes
    it. With ``forward_warning`` (the job's ``kill_warning_flags`` say ``BATCH_JOB``: Slurm signals the batch
    script only, i.e. this wrapper) the wrapper passes it on to the script, as Slurm would have signalled the
    script itself without the wrapper (:func:`warning_of`).
    """
    body = script if script.endswith("\n") else script + "\n"
    end = "SLURMAPI_SCRIPT_END_" + hashlib.sha256(body.encode()).hexdigest()[:16]
    stager, stager_end = (
        stager_script(staging, output_interval, try_number, inputs, staging_root) if staging is not None else ("", "")
    )
    return _WRAPPER.format(
        head=_quote(comment),
        room=max(room(comment, staged=staging is not None), 0),
        lines=lines,
        end=end,
        script=body,
        early=EARLY,
        version=(MARK_STAGED if staging is not None else MARK)[1:],
        staged='$us$(cat "$__sa_sd/staged" 2>/dev/null)' if staging is not None else "",
        stager=stager,
        stager_end=stager_end,
        **_warning_parts(warning_signal, forward_warning),
    )


def warning_of(job: Mapping[str, Any]) -> tuple[str, bool]:
    """``(warning_signal, forward_warning)`` for :func:`wrap_script` from a job's checked fields
    (:class:`~airflow_provider_slurmapi.api.spec.JobSpec`): the signal, or ``""`` without one, and whether the
    wrapper must pass it on. Slurm's ``kill_warning_flags`` say where the warning goes: ``BATCH_JOB`` (sbatch's
    ``--signal=B:``) the batch script's process only, the wrapper, which passes it on to the script; ``FULL_JOB``
    every process of the batch script's process group (the wrapper, the script and what it started, which get
    it from Slurm) and every step; neither, the steps only (``srun``; the batch script gets nothing)."""
    signal = job.get("kill_warning_signal")
    if not signal:
        return "", False
    flags = job.get("kill_warning_flags") or ()
    return str(signal), "BATCH_JOB" in flags and "FULL_JOB" not in flags


# The trapped signals that mean the job is ending (the wrapper notes them, then waits for the script).
_END_SIGNALS = ("TERM", "INT", "HUP", "USR1", "USR2")


def _warning_parts(signal: str, forward: bool) -> dict[str, str]:
    """The wrapper's parts that differ with a warning signal (without one, the wrapper is what it always was)."""
    plain = (
        'if [ -n "$__sa_arg" ]; then "$__sa_prog" "$__sa_arg" "$__sa_script"; else "$__sa_prog" "$__sa_script"; fi\n'
        "__sa_rc=$?\n"
    )
    if not signal:
        return {"warn_ignore": "", "run": plain, "warn_reset": ""}
    parts = {
        # the helpers started before the script (the early publication's timer, the stager) inherit this
        "warn_ignore": f"trap '' {signal}  # kill_warning_signal: not for the wrapper or its helpers\n",
        "warn_reset": "" if signal in _END_SIGNALS else f" {signal}",
    }
    if not forward:
        # Slurm signals the script itself (FULL_JOB) or only the steps: the wrapper just lives on.
        parts["run"] = f"trap : {signal}\n{plain}trap '' {signal}\n"
        return parts
    others = " ".join(name for name in _END_SIGNALS if name != signal)
    parts["run"] = _FORWARD.replace("@SIG@", signal).replace("@OTHERS@", others)
    return parts


# BATCH_JOB: Slurm signals this wrapper only. The script runs in the background, so that the wrapper's trap
# runs at once (a trap waits for a foreground child to end) and passes the signal on to it; ``wait`` returns
# early for every trapped signal, so the wrapper waits again while the script lives (its exit status then
# is the script's, as in the foreground). A shell starts a background child with stdin from /dev/null and
# SIGINT and SIGQUIT ignored: the child gets the wrapper's stdin (fd 9) and, where env can, their defaults.
_FORWARD = """__sa_child=
__sa_pend=
__sa_intr=
trap '__sa_signalled=1; __sa_intr=1' @OTHERS@
trap '__sa_intr=1; if [ -n "$__sa_child" ]; then kill -@SIG@ "$__sa_child" 2>/dev/null; else __sa_pend=1; fi' @SIG@
__sa_dflt=
! env --default-signal=INT,QUIT true 2>/dev/null || __sa_dflt="env --default-signal=INT,QUIT"
if {{ command exec 9<&0; }} 2>/dev/null; then
    if [ -n "$__sa_arg" ]; then
        $__sa_dflt "$__sa_prog" "$__sa_arg" "$__sa_script" 0<&9 9<&- &
    else
        $__sa_dflt "$__sa_prog" "$__sa_script" 0<&9 9<&- &
    fi
    exec 9<&-
elif [ -n "$__sa_arg" ]; then
    $__sa_dflt "$__sa_prog" "$__sa_arg" "$__sa_script" &
else
    $__sa_dflt "$__sa_prog" "$__sa_script" &
fi
__sa_child=$!
[ -z "$__sa_pend" ] || kill -@SIG@ "$__sa_child" 2>/dev/null
while :; do
    __sa_intr=
    wait "$__sa_child"
    __sa_rc=$?
    [ -n "$__sa_intr" ] || break
    # a trapped signal: the wait was cut short while the script lives on, or came as it ended
    ! kill -0 "$__sa_child" 2>/dev/null || continue
    # gone: this wait reaped it (a second one says 127; bash, having reaped it during the trap, may say -1),
    # or the shell did and keeps its status for one more wait
    wait "$__sa_child" 2>/dev/null
    __sa_st=$?
    case $__sa_st in 127 | -*) ;; *) __sa_rc=$__sa_st ;; esac
    break
done
trap '' @SIG@
""".replace("{{", "{").replace("}}", "}")


# POSIX sh. The user's script runs in the foreground, so a trapped TERM (Slurm signals every process of
# the job at its time limit or cancel) is handled once the script has ended; an exit by signal is passed on
# by the wrapper dying of the same signal. slurmctld refuses updates of a job it has marked as ending
# ("Job has already finished"), which it does before the time limit's TERM: so a timer also publishes
# EARLY seconds before $SLURM_JOB_END_TIME (halfway, for a job with less time than twice that), and that
# publication stands for a job killed at its limit.
EARLY = 30
_WRAPPER = """#!/bin/sh
# airflow-provider-slurmapi (publish_results=True): runs the script below unchanged, then publishes its
# result ($SLURMAPI_RETURN_FILE) and the tail of its output in this job's Slurm comment.
# Its files live in a folder of its own (mktemp -d: a name nobody can guess, mode 0700), never under a
# name another user of the node could create first; any failed write ends the job before the script runs.
__sa_fail() {{
    echo "slurmapi: $1: the job's script was not run" \\
        "(set TMPDIR, in the operator's environment, to a folder the job's user can write to)" >&2
    [ -z "${{__sa_dir:-}}" ] || rm -rf "$__sa_dir"
    exit 1
}}
{warn_ignore}__sa_dir=
__sa_dir=$(umask 077 && mktemp -d "${{TMPDIR:-/tmp}}/slurmapi.XXXXXXXXXX") &&
    [ -d "$__sa_dir" ] && [ -O "$__sa_dir" ] ||
    __sa_fail "cannot make a private folder in ${{TMPDIR:-/tmp}}"
__sa_script=$__sa_dir/slurmapi-script.${{SLURM_JOB_ID:-$$}}
SLURMAPI_RETURN_FILE=$__sa_dir/slurmapi-result.json
export SLURMAPI_RETURN_FILE
(umask 077 && cat > "$__sa_script") <<'{end}' || __sa_fail "cannot write the script to $__sa_dir"
{script}{end}
[ -s "$__sa_script" ] || __sa_fail "cannot write the script to $__sa_dir"
__sa_publish() (
LC_ALL=C
export LC_ALL
head={head}
room={room}
lines={lines}
# Valid UTF-8 only (slurmrestd drops a comment that is not, and the whole publication with it): iconv -c
# leaves out what is not UTF-8; without iconv, every byte past ASCII goes.
iconv=$(command -v iconv)
utf8() {{ if [ -n "$iconv" ]; then "$iconv" -f UTF-8 -t UTF-8 -c 2>/dev/null; else tr -d '\\200-\\377'; fi; }}
clean() {{ tr -d '\\000-\\010\\013-\\037\\177' | utf8; }}
tailof() {{
    [ "$lines" -gt 0 ] && [ -f "$1" ] && [ "$2" -gt 0 ] || return 0
    __t=$(tail -n "$lines" "$1" | clean)
    if [ "${{#__t}}" -gt "$2" ]; then
        __t=$(printf '%s' "$__t" | tail -c "$2" | sed '1d')
    fi
    printf '%s' "$__t"
}}
status=none
result=
if [ -f "$SLURMAPI_RETURN_FILE" ]; then
    size=$(wc -c < "$SLURMAPI_RETURN_FILE" | tr -d ' ')
    if [ "$(tr -cd '\\000' < "$SLURMAPI_RETURN_FILE" | wc -c)" -gt 0 ]; then
        status=nul
    elif [ "$size" -le "$room" ]; then
        status=ok
        result=$(tr -d '\\036\\037' < "$SLURMAPI_RETURN_FILE" | utf8)
    else
        status=big:$size
    fi
fi
left=$((room - ${{#result}}))
out=/proc/$__sa_pid/fd/1
err=/proc/$__sa_pid/fd/2
merged=0
if [ "$out" -ef "$err" ]; then
    merged=1
    o=$(tailof "$out" "$left")
    e=
else
    o=$(tailof "$out" "$left")
    e=$(tailof "$err" "$left")
    if [ $((${{#o}} + ${{#e}})) -gt "$left" ]; then
        half=$((left / 2))
        if [ "${{#e}}" -gt "$half" ] && [ "${{#o}}" -lt "$half" ]; then
            e=$(tailof "$err" $((left - ${{#o}})))
        elif [ "${{#o}}" -gt "$half" ] && [ "${{#e}}" -lt "$half" ]; then
            o=$(tailof "$out" $((left - ${{#e}})))
        else
            o=$(tailof "$out" "$half")
            e=$(tailof "$err" "$half")
        fi
    fi
fi
sc=$(command -v scontrol)
sa=$(command -v sacctmgr)
for d in /usr/bin /usr/local/bin /opt/slurm/bin; do
    [ -n "$sc" ] || {{ [ -x "$d/scontrol" ] && sc=$d/scontrol; }}
    [ -n "$sa" ] || {{ [ -x "$d/sacctmgr" ] && sa=$d/sacctmgr; }}
done
[ "${{SLURMAPI_PUBLISH_ACCOUNTING:-1}}" != 0 ] || sa=
if [ -z "$sc" ] && [ -z "$sa" ]; then
    echo "slurmapi: no scontrol on this node: the job's result and output tail are not published" >&2
    return 0
fi
us=$(printf '\\037')
rs=$(printf '\\036')
record="$head ${{rs}}{version}$us$__sa_job$us$status$us$merged{staged}$us$result$us$o$us$e"
# Accounting's copy (sacctmgr writes the job's accounting comment, which slurmdbd keeps whatever
# AccountingStoreFlags says; sacctmgr turns quotes into backticks): percent-quoted, marked by a "%" field.
if [ -n "$sa" ]; then
    copy=$(printf '%s' "$record" | sed -e 's/%/%25/g' -e 's/"/%22/g' -e "s/'/%27/g" -e 's/`/%60/g' \\
        -e "s/${{rs}}{version}$us/${{rs}}{version}%$us/")
    to=$(command -v timeout) && to="$to 15"
    $to "$sa" -i modify job where "JobId=$__sa_job" set "Comment=$copy" >/dev/null 2>&1
fi
[ -n "$sc" ] || return 0
# A busy slurmctld may time out: try again (not after a signal: the job is ending, Slurm refuses).
tries=3
[ "$1" != signalled ] || tries=1
until "$sc" update "JobId=$__sa_job" "Comment=$record" 2>/dev/null; do
    tries=$((tries - 1))
    if [ "$tries" -le 0 ]; then
        [ -n "$1" ] || echo "slurmapi: scontrol could not publish the job's result and output tail" >&2
        return 0
    fi
    sleep 1
done
)
__sa_pid=$$
# An array task names itself <array>_<task>: the last task's $SLURM_JOB_ID is the array's own id, and
# "scontrol update JobId=<array id>" would update every task of the array.
__sa_job=$SLURM_JOB_ID
[ -z "${{SLURM_ARRAY_TASK_ID:-}}" ] || __sa_job=${{SLURM_ARRAY_JOB_ID}}_$SLURM_ARRAY_TASK_ID
{stager}__sa_timer=
if [ -n "${{SLURM_JOB_END_TIME:-}}" ] && [ "$SLURM_JOB_END_TIME" -lt 4000000000 ] 2>/dev/null; then
    (
        __sa_left=$((SLURM_JOB_END_TIME - $(date +%s)))
        __sa_early=$((__sa_left / 2))
        [ "$__sa_early" -le {early} ] || __sa_early={early}
        __sa_at=$((SLURM_JOB_END_TIME - __sa_early))
        while __sa_left=$((__sa_at - $(date +%s))) && [ "$__sa_left" -gt 0 ]; do
            [ "$__sa_left" -le 5 ] || __sa_left=5
            sleep "$__sa_left"
        done
        trap '' TERM  # a publication under way ends before the final one starts (see below)
        __sa_publish early
    ) &
    __sa_timer=$!
fi
__sa_line=
IFS= read -r __sa_line < "$__sa_script"
__sa_line=${{__sa_line#??}}
__sa_line=${{__sa_line#"${{__sa_line%%[! \t]*}}"}}
__sa_prog=${{__sa_line%%[ \t]*}}
__sa_arg=${{__sa_line#"$__sa_prog"}}
__sa_arg=${{__sa_arg#"${{__sa_arg%%[! \t]*}}"}}
__sa_arg=${{__sa_arg%"${{__sa_arg##*[! \t]}}"}}
__sa_signalled=
trap '__sa_signalled=1' TERM INT HUP USR1 USR2
{run}if [ -n "$__sa_timer" ]; then
    kill "$__sa_timer" 2>/dev/null
    wait "$__sa_timer" 2>/dev/null
fi
{stager_end}if [ -n "$__sa_signalled" ]; then __sa_publish signalled; else __sa_publish; fi
rm -rf "$__sa_dir"
if [ "$__sa_rc" -gt 128 ] && [ "$__sa_rc" -lt 160 ]; then
    trap - TERM INT HUP USR1 USR2{warn_reset}
    kill -$((__sa_rc - 128)) $$ 2>/dev/null
fi
exit "$__sa_rc"
"""


# -- what the job page may show (what the task log masks stays masked there) -------------------------

# The XCom in which a task records, for the job page, what its jobs published as its log showed it.
XCOM_SHOWN = "slurm_published"
_MASKED_FIELDS = ("result_text", "stdout_tail", "stderr_tail")


def fingerprint(text_or_fields: str | Mapping[str, Any]) -> str:
    """SHA-256 of a comment or of a publication's fields: which text a recorded masked copy is of."""
    text = text_or_fields if isinstance(text_or_fields, str) else json.dumps(text_or_fields, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def _masked(text: str, redact: Any) -> dict[str, Any]:
    masked = str(redact(text))
    return {"sha256": fingerprint(text), **({"masked": masked} if masked != text else {})}


def shown_record(summary: Mapping[str, Any], user_comment: str, redact: Any) -> dict[str, Any]:
    """What the task records (XCom :data:`XCOM_SHOWN`) for the job page, with Airflow's ``redact``: per job
    (or array task) the fingerprint of what it published and, where masking changed it, the masked copy;
    the same for the user's own comment. Only fingerprints when nothing needed masking."""
    tasks = summary.get("tasks")
    items = [t for t in tasks if isinstance(t, Mapping)] if isinstance(tasks, list) else [summary]
    jobs: dict[str, Any] = {}
    for item in items:
        published = Published.from_dict(item.get("published"))
        if published is None:
            continue
        fields = published.as_dict()
        masked = {k: str(redact(v)) if k in _MASKED_FIELDS else v for k, v in fields.items()}
        entry: dict[str, Any] = {"sha256": fingerprint(fields)}
        if masked != fields:
            entry["masked"] = masked
        jobs[str(item.get("display_id") or item.get("job_id"))] = entry
    return {"jobs": jobs, "comment": _masked(user_comment, redact)}


def shown_publication(published: Published | None, recorded: Any, job: str) -> Published | None:
    """What the job page shows of ``published`` (job ``job``'s): the task's masked copy when the task
    recorded this very publication (:func:`shown_record`), else nothing (None)."""
    entry = recorded.get("jobs", {}).get(job) if isinstance(recorded, Mapping) else None
    if published is None or not isinstance(entry, Mapping) or entry.get("sha256") != fingerprint(published.as_dict()):
        return None
    masked = Published.from_dict(entry.get("masked"))
    return masked if masked is not None else published


def shown_comment(comment: str, recorded: Any) -> str | None:
    """The user's comment as the page shows it: the task's masked copy of this very comment, the comment
    itself when the task found nothing to mask in it, None when the task recorded nothing about it."""
    entry = recorded.get("comment") if isinstance(recorded, Mapping) else None
    if not isinstance(entry, Mapping) or entry.get("sha256") != fingerprint(comment):
        return None
    masked = entry.get("masked")
    return masked if isinstance(masked, str) else comment


# How many lines of a failed job's stderr its task's error quotes.
QUOTED_LINES = 10


@dataclass
class Reading:
    """What the provider read of a finished job's publication (:func:`read`).

    :param has_result: the job wrote a result; ``result`` holds it (for an array: ``{task: result}``).
    :param error: why a written result cannot be used (too large, not JSON): the task fails with it.
    :param log: lines for the task log: the tails of the output, or why nothing could be read.
    :param quote: the last lines of stderr, for a failed job's error message.
    :param unread: why nothing the job published could be read (empty when its publication was read;
        for an array, not set).
    """

    has_result: bool = False
    result: Any = None
    error: str = ""
    log: list[str] = field(default_factory=list)
    quote: str = ""
    unread: str = ""


def read(summary: Mapping[str, Any], read_one: Callable[[Mapping[str, Any]], Reading] | None = None) -> Reading:
    """Read the publication of a finished job from its summary (``SlurmJob.summary()``, arrays too).

    ``read_one`` reads one job's (or array task's) summary; default: from its comment. Staging passes
    one that reads what the job staged (``api.storage.read_staged``)."""
    read_one = read_one or _read_one
    tasks = summary.get("tasks")
    if not isinstance(tasks, list):
        return read_one(summary)
    reading = Reading()
    results: dict[str, Any] = {}
    for task in tasks:
        if not isinstance(task, Mapping):
            continue
        one = read_one({**task, "source": task.get("source", summary.get("source"))})
        reading.log.extend(one.log)
        if one.error:
            reading.error = reading.error or one.error
        if one.has_result:
            results[str(task.get("display_id"))] = one.result
        if one.quote and not reading.quote:
            reading.quote = f"{task.get('display_id')}: {one.quote}"
    reading.has_result, reading.result = bool(results), results
    return reading


def _read_one(summary: Mapping[str, Any]) -> Reading:
    label = f"Slurm job {summary.get('display_id') or summary.get('job_id')}"
    published = Published.from_dict(summary.get("published"))
    if published is None:
        unread = _why_nothing(summary)
        return Reading(log=[f"{label}: its result and output tail could not be read: {unread}"], unread=unread)
    reading = Reading()
    if published.merged:
        reading.log.append(tail_text(f"{label} output (stdout and stderr)", published.stdout_tail))
        stderr = published.stdout_tail
    else:
        reading.log.append(tail_text(f"{label} stdout", published.stdout_tail))
        reading.log.append(tail_text(f"{label} stderr", published.stderr_tail))
        stderr = published.stderr_tail
    reading.quote = "\n".join(stderr.splitlines()[-QUOTED_LINES:])
    if published.has_result:
        try:
            reading.result, reading.has_result = published.result(), True
        except ResultError as err:
            reading.error = f"{label}: {err}"
    return reading


def tail_text(what: str, tail: str) -> str:
    if not tail:
        return f"{what}: (empty)"
    return f"{what}, last {len(tail.splitlines())} lines:\n{tail}"


def _why_nothing(summary: Mapping[str, Any]) -> str:
    other = summary.get("published_for")
    if other:
        return (
            f"its comment holds a publication that names job {_shown(str(other))[:40]}, not this one: another job "
            "of the same Slurm user wrote it there (Slurm lets a user update any of their own jobs), so it is "
            "not trusted (see the provider's docs/security.rst)"
        )
    state = str(summary.get("state") or "").split(" ")[0]
    if state.startswith("CANCELLED"):
        return (
            "the job was cancelled before it published anything (Slurm refuses a job's update of its own record "
            "once it is cancelled; a job cancelled while it ran shows only what it published before)"
        )
    if summary.get("source") == "slurmdb":
        return (
            "the job had left Slurm's active queue (MinJobAge) when its final record was read, and its "
            "accounting record holds no copy of what it published (the job's wrapper writes one with sacctmgr "
            "where the node has it and $SLURMAPI_PUBLISH_ACCOUNTING is not 0; "
            "AccountingStoreFlags=job_comment keeps the job's own comment)"
        )
    return (
        "the job published nothing: its wrapper did not reach its end (killed by SIGKILL, e.g. past KillWait "
        "after its time limit, or a failed launch), or it found no scontrol on the node (see the job's stderr)"
    )
