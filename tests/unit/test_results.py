"""The result wrapper and its parser (api/results.py): the wrapper really runs under ``/bin/sh``.

An ``scontrol`` on the wrapper's ``PATH`` records what the wrapper asks of Slurm and refuses a comment
longer than slurmctld's 1024 bytes, as Slurm 24.11 does (measured in tests/real_slurm/test_scenarios_results.py);
the published comment is then read back with :func:`results.parse` as the operator reads it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from airflow_provider_slurmapi.api import results
from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.identity import parse_tag, split_comment, tagged_comment, task_instance_tag

TAG = "airflow-ti:dag/train/manual__2026-01-01/-1 try:1"

# Records each update's comment (NUL-terminated) and refuses what slurmctld refuses.
SCONTROL = """#!/bin/sh
[ "$1" = update ] || exit 1
if [ -s "$SCONTROL_LOG.fail" ]; then  # fail this many times first (a busy slurmctld)
    n=$(cat "$SCONTROL_LOG.fail"); echo $((n - 1)) > "$SCONTROL_LOG.fail"
    [ "$n" -le 0 ] || { echo "Socket timed out on send/recv operation" >&2; exit 1; }
fi
printf '%s\n' "$2" >> "$SCONTROL_LOG.ids"
for a in "$@"; do
    case $a in
    Comment=*)
        v=${a#Comment=}
        n=$(printf '%s' "$v" | wc -c)
        if [ "$n" -gt 1024 ]; then echo "Pathname of a file, directory or other parameter too long" >&2; exit 1; fi
        printf '%s\\0' "$v" >> "$SCONTROL_LOG";;
    esac
done
"""

# Records each accounting comment (NUL-terminated) as slurmdbd stores it: sacctmgr turns quotes into
# backticks (measured on Slurm 24.11: tests/real_slurm/test_scenarios_results.py).
SACCTMGR = """#!/bin/sh
[ "$1 $2 $3 $4" = "-i modify job where" ] && [ "$6" = set ] || exit 1
printf '%s\\n' "$5" >> "$SCONTROL_LOG.acct.ids"
printf '%s\\0' "${7#Comment=}" | tr '\\042\\047' '\\140\\140' >> "$SCONTROL_LOG.acct"
"""


JOB = "4242"  # the $SLURM_JOB_ID of run()'s job


def record(status: str, merged: str, result: str, out: str, err: str, *, job: str = JOB, quoted: bool = False) -> str:
    """A publication as the wrapper writes it (see results.MARK), after the task's tag."""
    flag = results.QUOTED if quoted else ""
    return f"{TAG} {results.MARK}{flag}{results.SEP}" + results.SEP.join([job, status, merged, result, out, err])


def run(tmp_path: Path, script: str, *, comment: str = TAG, lines: int = 50, merged: bool = False, env=None):
    """Run ``script`` wrapped, as a batch job would: ``(exit status, [published comments], stdout, stderr)``;
    accounting's copies are in :func:`accounted`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("scontrol", SCONTROL), ("sacctmgr", SACCTMGR)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "scontrol.log"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(results.wrap_script(script, comment, lines))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    environ = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SCONTROL_LOG": str(log),
        "SLURM_JOB_ID": JOB,
        "TMPDIR": str(tmp_path),
        **(env or {}),
    }
    with out.open("wb") as stdout, out.open("ab") if merged else err.open("wb") as stderr:
        proc = subprocess.run(["/bin/sh", str(wrapper)], stdout=stdout, stderr=stderr, env=environ, timeout=60)
    comments = log.read_bytes().decode().split("\0")[:-1] if log.exists() else []  # (not UTF-8: fails here)
    read = {"errors": "replace"}  # a job's output may be any bytes
    return proc.returncode, comments, out.read_text(**read), "" if merged else err.read_text(**read)


def accounted(tmp_path: Path) -> list[str]:
    """The accounting comments the wrapper wrote (with sacctmgr), as slurmdbd keeps them."""
    log = tmp_path / "scontrol.log.acct"
    return log.read_bytes().decode().split("\0")[:-1] if log.exists() else []


def published(comment: str) -> results.Published:
    head, found = results.split(comment)
    assert head == TAG and comment.startswith(TAG + " ")  # the tag first, unchanged
    assert found is not None
    return found


def test_a_result_and_both_tails_are_published_and_the_exit_code_kept(tmp_path):
    script = '#!/bin/bash\necho out-1\necho err-1 >&2\necho \'{"val_acc": 0.93}\' > "$SLURMAPI_RETURN_FILE"\nexit 3\n'
    rc, comments, out, err = run(tmp_path, script)
    assert rc == 3 and out == "out-1\n" and err == "err-1\n"
    (comment,) = comments
    found = published(comment)
    assert found.result() == {"val_acc": 0.93}
    assert (found.stdout_tail, found.stderr_tail, found.merged) == ("out-1", "err-1", False)
    assert split_comment(comment)[:2] == ("airflow-ti:dag/train/manual__2026-01-01/-1", 1)


@pytest.mark.skipif(shutil.which("python3") is None, reason="no python3 on PATH")
def test_a_python_script_runs_with_its_own_interpreter_environment_and_arguments(tmp_path):
    script = (
        "#!/usr/bin/env python3\nimport json, os, sys\nprint('from python')\n"
        "json.dump({'job': os.environ['SLURM_JOB_ID'], 'py': sys.version_info[0]}, "
        "open(os.environ['SLURMAPI_RETURN_FILE'], 'w'))\nsys.exit(5)\n"
    )
    rc, comments, out, _ = run(tmp_path, script)
    assert rc == 5 and out == "from python\n"
    assert published(comments[0]).result() == {"job": "4242", "py": 3}


def test_a_shebang_argument_is_passed_as_the_kernel_passes_it(tmp_path):
    rc, comments, out, _ = run(tmp_path, "#! /bin/sh -eu\necho before\nfalse\necho never\n")
    assert rc == 1 and out == "before\n"
    assert published(comments[0]).stdout_tail == "before"


def test_merged_output_has_one_tail_and_no_result_is_none(tmp_path):
    rc, comments, _, _ = run(tmp_path, "#!/bin/sh\necho one\necho two >&2\n", merged=True)
    found = published(comments[0])
    assert rc == 0 and found.merged and found.stdout_tail == "one\ntwo" and not found.has_result
    assert results.read({"job_id": 1, "published": found.as_dict()}).quote == "one\ntwo"


def test_only_the_last_lines_are_published_and_zero_lines_publishes_the_result_only(tmp_path):
    script = '#!/bin/sh\nseq 1 100\necho 7 > "$SLURMAPI_RETURN_FILE"\n'
    _, comments, _, _ = run(tmp_path, script, lines=3)
    assert published(comments[0]).stdout_tail == "98\n99\n100"
    _, comments, _, _ = run(tmp_path, script, lines=0)
    found = published(comments[-1])
    assert found.stdout_tail == "" and found.result() == 7


def test_everything_fits_in_slurms_comment_limit(tmp_path):
    script = '#!/bin/sh\nseq 1 5000\nseq 1 5000 >&2\nprintf \'"%0600d"\' 1 > "$SLURMAPI_RETURN_FILE"\n'
    _, comments, _, _ = run(tmp_path, script)
    (comment,) = comments  # the fake scontrol refuses > 1024 bytes: the one publication passed
    assert len(comment.encode()) <= results.COMMENT_LIMIT
    found = published(comment)
    assert found.result() == "0" * 599 + "1"
    assert found.stdout_tail.endswith("4999\n5000") and found.stderr_tail.endswith("4999\n5000")
    assert found.stdout_tail.splitlines()[0].isdigit()  # cut at a line's start, not inside one


def test_a_result_too_large_is_named_with_its_size_and_the_tails_still_arrive(tmp_path):
    script = "#!/bin/sh\necho last words\nhead -c 5000 /dev/zero | tr '\\0' 1 > \"$SLURMAPI_RETURN_FILE\"\n"
    _, comments, _, _ = run(tmp_path, script)
    found = published(comments[0])
    assert found.result_status == "big:5000" and found.stdout_tail == "last words"
    with pytest.raises(results.ResultError, match="is 5000 bytes, more than its Slurm comment holds"):
        found.result()


def test_invalid_json_is_a_clear_error(tmp_path):
    _, comments, _, _ = run(tmp_path, "#!/bin/sh\necho 'val_acc=0.93' > \"$SLURMAPI_RETURN_FILE\"\n")
    with pytest.raises(results.ResultError, match=r"not valid JSON .*'val_acc=0.93'"):
        published(comments[0]).result()


def test_control_characters_of_the_output_cannot_break_the_record(tmp_path):
    script = "#!/bin/sh\nprintf 'a\\036b\\037c\\033[0m\\n'\nprintf 'x\\037y' >&2\n"
    _, comments, _, _ = run(tmp_path, script)
    found = published(comments[0])
    assert (found.stdout_tail, found.stderr_tail) == ("abc[0m", "xy")


def test_a_script_killed_by_a_signal_publishes_and_the_wrapper_dies_of_the_same_signal(tmp_path):
    rc, comments, _, _ = run(tmp_path, "#!/bin/sh\necho before\nkill -TERM $$\necho never\n")
    assert rc == -signal.SIGTERM
    assert published(comments[0]).stdout_tail == "before"


def test_without_scontrol_the_script_still_runs_and_keeps_its_exit_code(tmp_path):
    # no scontrol anywhere: /usr/bin and the usual places are looked in too
    if any(Path(d, "scontrol").exists() for d in ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin")):
        pytest.skip("this machine has an scontrol")
    tools = tmp_path / "tools"  # the wrapper's tools, and no scontrol
    tools.mkdir()
    for tool in ("cat", "rm", "tr", "wc", "tail", "sed", "date", "sleep", "mktemp"):
        (tools / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    wrapper = tmp_path / "w.sh"
    wrapper.write_text(results.wrap_script("#!/bin/sh\necho hi\nexit 4\n", TAG))
    env = {"PATH": str(tools), "SLURM_JOB_ID": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["/bin/sh", str(wrapper)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 4 and proc.stdout == "hi\n"
    assert "no scontrol on this node" in proc.stderr


def test_the_return_file_and_the_script_copy_are_removed(tmp_path):
    run(tmp_path, '#!/bin/sh\necho 1 > "$SLURMAPI_RETURN_FILE"\necho "$SLURMAPI_RETURN_FILE"\n')
    assert sorted(p.name for p in tmp_path.glob("slurmapi*")) == []


def test_the_wrapper_keeps_its_files_in_a_private_folder_that_squatted_names_do_not_touch(tmp_path):
    """Another user of the node may create, first, any name in a shared TMPDIR: the wrapper's files live in
    a folder of its own, with a name nobody can guess, that only the job's user may enter."""
    forged = tmp_path / "slurmapi-result.4242.json"  # the names the wrapper once used
    forged.write_text('{"val_acc": 0.99}')
    (tmp_path / "slurmapi-script.4242.1").write_text("#!/bin/sh\necho forged script\n")
    script = '#!/bin/sh\nd=$(dirname "$SLURMAPI_RETURN_FILE")\necho "$d $(stat -c %a "$d")"\necho "$0"\n'
    rc, comments, out, _ = run(tmp_path, script)
    folder, mode = out.splitlines()[0].split()
    assert rc == 0 and mode == "700" and Path(folder).parent == tmp_path
    assert re.fullmatch(r"slurmapi\.\w{10}", Path(folder).name)  # mktemp's random name
    assert out.splitlines()[1].startswith(folder + "/")  # the script ran from there, not a squatted copy
    published = results.parse(comments[-1], JOB)
    assert published is not None and not published.has_result  # the forged result is not the job's
    assert "forged" not in out and not Path(folder).exists()  # and the folder is gone at the end


@pytest.mark.parametrize("tmpdir", ["missing", "a-file"])
def test_a_temporary_folder_the_job_cannot_write_to_fails_the_job_before_its_script_runs(tmp_path, tmpdir):
    where = tmp_path / "tmp"
    if tmpdir == "a-file":
        where.write_text("not a folder")
    rc, comments, out, err = run(tmp_path, "#!/bin/sh\necho ran\n", env={"TMPDIR": str(where)})
    assert rc == 1 and "ran" not in out and comments == []
    assert f"slurmapi: cannot make a private folder in {where}: the job's script was not run" in err
    assert "set TMPDIR" in err


def test_a_job_and_an_array_task_each_update_only_their_own_record(tmp_path):
    run(tmp_path, "#!/bin/sh\n")
    run(tmp_path, "#!/bin/sh\n", env={"SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"})
    # JobId=<array id> would update every task of the array (the last task's $SLURM_JOB_ID is the array's)
    assert (tmp_path / "scontrol.log.ids").read_text().split() == ["JobId=4242", "JobId=4240_2"]


def test_a_busy_slurmctld_is_asked_again_and_a_lasting_failure_is_said(tmp_path):
    (tmp_path / "scontrol.log.fail").write_text("2")
    rc, comments, _, err = run(tmp_path, "#!/bin/sh\necho once\n")
    assert rc == 0 and published(comments[0]).stdout_tail == "once" and err == ""
    (tmp_path / "scontrol.log.fail").write_text("9")
    rc, comments, _, err = run(tmp_path, "#!/bin/sh\nexit 2\n")
    assert rc == 2 and len(comments) == 1  # three tries, none passed
    assert "scontrol could not publish the job's result and output tail" in err


def test_a_time_limited_job_publishes_before_its_end_and_the_final_record_wins(tmp_path):
    """Slurm refuses the update of a job killed at its time limit: the wrapper publishes before
    ``$SLURM_JOB_END_TIME`` (halfway through a short limit), and a job that ends normally later publishes
    again, after that publication (never overwritten by it)."""
    # ends once the early publication is in
    script = '#!/bin/sh\necho before\nwhile [ ! -s "$SCONTROL_LOG" ]; do sleep 0.1; done\necho after\n'
    end = str(int(time.time()) + 4)
    rc, comments, _, _ = run(tmp_path, script, env={"SLURM_JOB_END_TIME": end})
    assert rc == 0
    assert [published(c).stdout_tail for c in comments] == ["before", "before\nafter"]


def test_a_comment_that_leaves_no_room_is_seen_before_sending():
    assert results.room("x" * 1000) <= 0 < results.room(TAG)


@pytest.mark.parametrize("bad", [-1, 10001, True, "50", 2.0])
def test_output_tail_lines_is_checked(bad):
    with pytest.raises(SlurmJobSpecError, match="output_tail_lines"):
        results.tail_lines(bad)


def test_a_comment_without_a_publication_parses_as_nothing():
    assert results.split(TAG) == (TAG, None)
    assert results.parse(f"{TAG} {results.MARK}{results.SEP}broken", JOB) is None


def test_read_too_late_says_why_and_has_no_result():
    reading = results.read({"job_id": 9, "source": "slurmdb"})
    assert not reading.has_result and reading.result is None
    assert "left Slurm's active queue" in reading.log[0] and "AccountingStoreFlags=job_comment" in reading.log[0]
    assert "did not reach its end" in results.read({"job_id": 9, "source": "slurm"}).log[0]


def test_an_array_has_one_result_per_task():
    def task(n: int, text: str) -> dict:
        one = results.Published("ok", text, f"out {n}", f"err {n}", merged=False)
        return {"display_id": f"7_{n}", "published": one.as_dict()}

    reading = results.read({"job_id": 7, "tasks": [task(0, "1"), task(1, json.dumps({"a": 2}))]})
    assert reading.has_result and reading.result == {"7_0": 1, "7_1": {"a": 2}}
    assert reading.quote == "7_0: err 0"


def test_accountings_copy_survives_sacctmgrs_quotes_and_reads_back_the_same(tmp_path):
    """sacctmgr turns quotes into backticks: the copy is percent-quoted, and reads back exactly."""
    comment = TAG + ' it\'s "mine" 100% `x`'
    script = (
        "#!/bin/sh\necho \"quote ' and \\\" and 50% and %22\"\necho 'err `x`' >&2\n"
        'echo \'{"path": "/ckpt/it\'"\'"\'s", "p": "%25"}\' > "$SLURMAPI_RETURN_FILE"\n'
    )
    rc, comments, _, _ = run(tmp_path, script, comment=comment)
    (queued,) = comments
    (copy,) = accounted(tmp_path)
    assert rc == 0 and '"' not in copy and "'" not in copy  # nothing for sacctmgr to mangle
    assert results.split(copy) == results.split(queued) == (comment, results.parse(queued, JOB))
    found = results.parse(copy, JOB)
    assert found is not None and found.result() == {"path": "/ckpt/it's", "p": "%25"}
    assert found.stdout_tail == "quote ' and \" and 50% and %22" and found.stderr_tail == "err `x`"
    assert split_comment(copy)[:2] == ("airflow-ti:dag/train/manual__2026-01-01/-1", 1)


def test_accountings_copy_names_the_task_instance_whatever_its_run_id(tmp_path):
    """The job page maps accounting's copy to its task instance as it maps the queue's comment, also for
    a run id with the characters the copy quotes."""
    tag = task_instance_tag("dag", "train", 'manual__it\'s_100%_"x"', -1)
    _, comments, _, _ = run(tmp_path, "#!/bin/sh\necho hi\n", comment=tagged_comment(tag, None, 1))
    (copy,) = accounted(tmp_path)
    assert "%25" in copy and "%27" in copy  # quoted, so not the same text as the queue's comment
    assert parse_tag(copy) == parse_tag(comments[0])
    ref = parse_tag(copy)
    assert ref is not None and ref.run_id == 'manual__it\'s_100%_"x"' and ref.task_id == "train"


def test_accountings_copy_names_the_job_or_array_task_and_can_be_turned_off(tmp_path):
    run(tmp_path, "#!/bin/sh\n")
    run(tmp_path, "#!/bin/sh\n", env={"SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"})
    assert (tmp_path / "scontrol.log.acct.ids").read_text().split() == ["JobId=4242", "JobId=4240_2"]
    _, comments, _, _ = run(tmp_path, "#!/bin/sh\necho x\n", env={"SLURMAPI_PUBLISH_ACCOUNTING": "0"})
    assert len(accounted(tmp_path)) == 2 and published(comments[-1]).stdout_tail == "x"


def test_an_old_reader_takes_accountings_copy_for_no_publication():
    """A provider release before the copy existed reads a copy as "nothing published", never as a wrong result."""
    copy = record("ok", "0", "1", "", "", quoted=True)
    fields = copy.partition(results.MARK)[2].split(results.SEP)
    assert fields[0] != ""  # what the earlier split() required of the field after the mark
    assert results.parse(copy, JOB) == results.Published("ok", "1", "", "", merged=False, job=JOB)


def test_a_mark_in_the_submitted_comment_never_stands_for_the_jobs_publication():
    """The wrapper's record is the comment's last part (it strips RS and US from what it publishes): a
    forged record in the submitted comment is read as part of the head."""
    forged = record("ok", "0", '{"val_acc": 0.99}', "", "")
    real = forged + " " + record("none", "1", "", "done", "").removeprefix(TAG + " ")
    head, published = results.split(real)
    assert head == forged and published == results.Published("none", "", "done", "", merged=True, job=JOB)


def test_a_publication_counts_only_in_the_record_of_the_job_it_names():
    """Another job of the same Slurm user may write this job's comment (scontrol update, sacctmgr): a copy
    of its own publication, or one made up, names that job or no job, and is not this job's (#31 item 6)."""
    theirs = record("ok", "0", '{"ckpt": "gs://mallory/evil"}', "", "", job="4243")
    assert results.parse(theirs, JOB) is None and results.foreign(theirs, JOB) == "4243"
    assert results.parse(theirs, "4243") is not None and results.foreign(theirs, "4243") == ""
    task_copy = record("ok", "0", "1", "", "", job="4240_2", quoted=True)  # an array task's accounting copy
    assert results.parse(task_copy, "4240_2") is not None and results.parse(task_copy, "4240_3") is None
    version_1 = f"{TAG} \x1eslurmapi1{results.SEP}ok{results.SEP}0{results.SEP}1{results.SEP}{results.SEP}"
    assert results.split(version_1) == (version_1, None)  # unbound: no longer read
    reading = results.read({"job_id": 4242, "display_id": JOB, "source": "slurm", "published_for": "4243"})
    assert not reading.has_result and "names job 4243, not this one" in reading.log[0]
    assert "same Slurm user" in reading.unread
    # A job's own record, read as the provider reads it, says so too.
    from airflow_provider_slurmapi.api.jobs import SlurmJob
    from tests.fixtures import recorded

    job = SlurmJob.from_job_info({**recorded("job_completed")["jobs"][0], "job_id": 4242, "comment": theirs})
    assert job.published is None and job.summary()["published_for"] == "4243"


def test_published_text_is_read_without_terminal_escapes_or_lone_surrogates():
    """A reply may hold what the wrapper would not write (a lone surrogate breaks the deferred task's resume
    with an execution-API 500; an OSC or CSI sequence replays in a terminal): read clean."""
    comment = record("ok", "1", '"\ud800"', "a\x1b]0;title\x07b\u009b31m\tc\n\ud800", "")
    published = results.parse(comment, JOB)
    assert published is not None
    assert published.stdout_tail == "a]0;titleb31m\tc\n\ufffd"
    assert published.result() == "\ufffd"
    published.stdout_tail.encode()  # valid UTF-8 throughout


@pytest.mark.parametrize("state", ["CANCELLED", "CANCELLED by 1000"])
def test_a_cancelled_job_that_published_nothing_is_said_to_be_cancelled(state):
    """Not "killed by SIGKILL ... or a failed launch": a user's cancel is what ended it."""
    reading = results.read({"job_id": 7, "display_id": "7", "state": state, "source": "slurm", "published": None})
    assert reading.unread.startswith("the job was cancelled before it published anything"), reading.unread
    assert "SIGKILL" not in reading.log[0]


def test_a_job_that_published_nothing_for_another_reason_is_told_apart():
    reading = results.read({"job_id": 7, "display_id": "7", "state": "FAILED", "source": "slurm", "published": None})
    assert "did not reach its end" in reading.unread


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("printf '{\"loss\": NaN}'", "NaN is not a JSON number"),
        ("printf '[Infinity]'", "Infinity is not a JSON number"),
        ('python3 -c \'print("[" * 100 + "]" * 100)\'', "nests deeper than 64 levels"),
        ("printf '{\"a\": 1}\\000'", "holds a NUL byte"),
    ],
    ids=["NaN", "Infinity", "deep", "NUL"],
)
def test_a_result_json_cannot_carry_is_refused_with_a_clear_message(tmp_path, written, said):
    rc, comments, _, _ = run(tmp_path, f'#!/bin/sh\n{written} > "$SLURMAPI_RETURN_FILE"\n')
    published = results.parse(comments[-1], JOB)
    assert rc == 0 and published is not None and published.has_result
    with pytest.raises(results.ResultError, match=said):
        published.result()


@pytest.mark.parametrize("with_iconv", [True, False], ids=["iconv", "no-iconv"])
def test_output_that_is_not_utf8_is_published_without_its_bad_bytes(tmp_path, with_iconv):
    """slurmrestd drops a comment that is not UTF-8, and the whole publication with it: the wrapper leaves
    the bad bytes out (iconv -c; without iconv, every byte past ASCII)."""
    script = (
        "#!/bin/sh\nprintf 'loss \\377\\376 h\\303\\251\\nafter\\n'\n"
        'printf \'[1, "\\377x"]\' > "$SLURMAPI_RETURN_FILE"\n'
    )
    env = None
    if not with_iconv:
        tools = tmp_path / "tools"
        tools.mkdir()
        for tool in ("cat", "rm", "tr", "wc", "tail", "sed", "date", "sleep", "mktemp", "printf"):
            if shutil.which(tool):
                (tools / tool).symlink_to(shutil.which(tool) or "")
        env = {"PATH": f"{tmp_path / 'bin'}:{tools}"}
    rc, comments, _, _ = run(tmp_path, script, env=env)
    assert rc == 0
    raw = comments[-1]
    raw.encode("utf-8")  # valid UTF-8, as slurmrestd needs it
    published = results.parse(raw, JOB)
    assert published is not None and published.result() == [1, "x"]
    expected = "loss  hé\nafter" if with_iconv else "loss  h\nafter"
    assert published.stdout_tail == expected


# -- the warning before the time limit (kill_warning_signal): Slurm signals the wrapper (BATCH_JOB), which passes
# it on to the script, or the whole process group (FULL_JOB), which the wrapper and its helpers live through --

FORWARD, SHIELD, NONE = "forward", "shield", "none"
WARNING_MODES = {FORWARD: ("USR1", True), SHIELD: ("USR1", False), NONE: ("", False)}

# Traps USR1 and says so in $LOG; a child it started (in its process group) does the same; both run until
# $LOG.stop exists, then the script exits 7.
TRAPPING = """#!/bin/sh
trap 'echo "script USR1" >> "$LOG"' USR1
sh -c 'trap "echo child USR1 >> \\"\\$LOG\\"" USR1; touch "$LOG.child"; until [ -e "$LOG.stop" ]; do sleep 0.05; done' &
until [ -e "$LOG.child" ]; do sleep 0.05; done
touch "$LOG.ready"
until [ -e "$LOG.stop" ]; do sleep 0.05; done
wait
echo done
exit 7
"""


def start(
    tmp_path: Path, script: str, mode: str, *, env=None, stdin=None, shell: str = "/bin/sh"
) -> tuple[subprocess.Popen[bytes], Path]:
    """The wrapped ``script`` running as a batch job's process (the leader of its own process group, as
    slurmstepd starts it), with the fake scontrol of :func:`run`; returns it and its ``$LOG``. ``mode`` is a
    key of WARNING_MODES, or ``forward:<signal>``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("scontrol", SCONTROL), ("sacctmgr", SACCTMGR)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    signal_name, forward = WARNING_MODES.get(mode) or (mode.partition(":")[2], True)
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(results.wrap_script(script, TAG, warning_signal=signal_name, forward_warning=forward))
    log = tmp_path / "log"
    environ = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SCONTROL_LOG": str(tmp_path / "scontrol.log"),
        "SLURM_JOB_ID": JOB,
        "TMPDIR": str(tmp_path),
        "LOG": str(log),
        **(env or {}),
    }
    with (tmp_path / "out.txt").open("wb") as out:
        proc = subprocess.Popen(
            [shell, str(wrapper)], stdin=stdin, stdout=out, stderr=subprocess.STDOUT, env=environ,
            start_new_session=True,
        )  # fmt: skip
    return proc, log


def until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.02)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def finish(proc: subprocess.Popen[bytes], tmp_path: Path) -> tuple[int, list[str]]:
    (tmp_path / "log.stop").touch()
    rc = proc.wait(timeout=60)
    log = tmp_path / "scontrol.log"
    return rc, log.read_bytes().decode().split("\0")[:-1] if log.exists() else []


# /bin/sh: dash on Debian; bash: /bin/sh on RHEL, and the emulator's runner
SHELLS = ["/bin/sh", shutil.which("bash") or "/bin/bash"]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_warning_goes_on_to_the_script_alone_which_runs_on_and_keeps_its_exit_code(tmp_path, shell):
    """BATCH_JOB: Slurm signals the batch script's process, the wrapper; the script gets it once, as it would
    without the wrapper (not what it started: Slurm would not signal those either), and runs on."""
    proc, log = start(tmp_path, TRAPPING, FORWARD, shell=shell)
    until((tmp_path / "log.ready").exists, "script")
    os.kill(proc.pid, signal.SIGUSR1)
    until(lambda: lines(log) == ["script USR1"], "warning in the script")
    time.sleep(0.3)  # a second delivery, or one to the child, would show by now
    rc, comments = finish(proc, tmp_path)
    assert rc == 7 and lines(log) == ["script USR1"]
    assert published(comments[-1]).stdout_tail == "done"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("attempt", range(5))
def test_a_script_that_ends_on_the_warning_ends_the_job_with_its_own_code(tmp_path, shell, attempt):
    """The script checkpoints and exits at once: the wrapper's wait, cut short by the warning, still ends with
    the script's own exit code (however the shell reaped it)."""
    script = "#!/bin/sh\ntrap 'exit 3' USR1\ntouch \"$LOG.ready\"\nwhile :; do sleep 0.01; done\n"
    proc, _ = start(tmp_path, script, FORWARD, shell=shell)
    until((tmp_path / "log.ready").exists, "script")
    os.kill(proc.pid, signal.SIGUSR1)
    assert proc.wait(timeout=60) == 3


@pytest.mark.parametrize(("signal_name", "signum"), [("USR1", signal.SIGUSR1), ("ALRM", signal.SIGALRM)])
def test_a_script_that_does_not_trap_the_warning_dies_of_it_and_so_does_the_wrapper(tmp_path, signal_name, signum):
    script = '#!/bin/sh\necho started\ntouch "$LOG.ready"\nwhile :; do sleep 0.05; done\n'
    proc, _ = start(tmp_path, script, f"forward:{signal_name}")
    until((tmp_path / "log.ready").exists, "script")
    os.kill(proc.pid, signum)
    assert proc.wait(timeout=60) == -signum  # the wrapper dies of the script's signal, after publishing
    (comment,) = (tmp_path / "scontrol.log").read_bytes().decode().split("\0")[:-1]
    assert published(comment).stdout_tail.startswith("started")  # then the shell's "User defined signal 1"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("mode", [NONE, SHIELD, FORWARD])
def test_the_time_limits_term_ends_the_script_as_it_always_did(tmp_path, mode, shell):
    """Slurm's TERM at the time limit (or a cancel) reaches every process of the job: whatever the warning,
    the wrapper waits for the script's TERM trap to end and exits with its code; a script without one dies of
    it, and the wrapper with it."""
    trapping = (
        "#!/bin/sh\ntrap 'sleep 0.5; echo term >> \"$LOG\"; exit 5' TERM\n"
        'touch "$LOG.ready"\nwhile :; do sleep 0.05; done\n'
    )
    proc, log = start(tmp_path, trapping, mode, shell=shell)
    until((tmp_path / "log.ready").exists, "script")
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 5 and lines(log) == ["term"]

    other = tmp_path / "untrapped"
    other.mkdir()
    proc, _ = start(other, '#!/bin/sh\ntouch "$LOG.ready"\nwhile :; do sleep 0.05; done\n', mode, shell=shell)
    until((other / "log.ready").exists, "script")
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("mode", [NONE, FORWARD])
def test_the_script_gets_the_jobs_stdin_and_the_default_int_and_quit(tmp_path, mode, shell):
    """A shell starts a background command with stdin from /dev/null and SIGINT and SIGQUIT ignored: the
    wrapper that runs the script in the background gives it the job's stdin and the defaults back."""
    script = '#!/bin/sh\nread -r line\necho "read $line"\ngrep SigIgn /proc/$$/status\n'
    source = tmp_path / "in.txt"
    source.write_text("the job's input\n")
    with source.open("rb") as stdin:
        proc, _ = start(tmp_path, script, mode, stdin=stdin, shell=shell)
        assert proc.wait(timeout=60) == 0
    out = (tmp_path / "out.txt").read_text()
    assert "read the job's input" in out
    found = re.search(r"SigIgn:\s*([0-9a-f]+)", out)
    assert found is not None, out
    ignored = int(found.group(1), 16)
    assert ignored & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1)) == 0


def test_when_slurm_signals_the_whole_job_the_wrapper_and_its_timer_live_on(tmp_path):
    """FULL_JOB: Slurm signals every process of the batch script's group: the script and its child get it from
    Slurm, once each; the wrapper passes nothing on, and its helpers (the early publication's timer) live on."""
    end = str(int(time.time()) + 4)  # the early publication comes halfway to this end
    proc, log = start(tmp_path, TRAPPING, SHIELD, env={"SLURM_JOB_END_TIME": end})
    until((tmp_path / "log.ready").exists, "script")
    os.killpg(proc.pid, signal.SIGUSR1)
    until(lambda: sorted(lines(log)) == ["child USR1", "script USR1"], "warning in the script and its child")
    until((tmp_path / "scontrol.log").exists, "early publication")
    rc, comments = finish(proc, tmp_path)
    assert rc == 7 and sorted(lines(log)) == ["child USR1", "script USR1"]
    # the early publication, then the final one (the sleeps the signal killed said so: "User defined signal 1")
    assert len(comments) == 2 and published(comments[-1]).stdout_tail.endswith("done")


def checkpoint_on_warning() -> dict:
    import os
    import signal
    import time

    got: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
    open(os.environ["LOG"] + ".ready", "w").close()
    while not got:
        time.sleep(0.02)
    return {"checkpointed": True, "signals": got}


@pytest.mark.skipif(shutil.which("python3") is None, reason="no python3 on PATH")
def test_a_task_slurm_function_gets_the_warning(tmp_path):
    """``@task.slurm``'s script execs Python: the warning the wrapper passes on reaches the function's handler."""
    from airflow_provider_slurmapi.decorators import pyjob

    call = json.dumps({"args": [], "kwargs": {}})
    script = pyjob.job_script(pyjob.function_source(checkpoint_on_warning), "checkpoint_on_warning", call)
    proc, _ = start(tmp_path, script, FORWARD)
    until((tmp_path / "log.ready").exists, "function")
    os.kill(proc.pid, signal.SIGUSR1)
    rc, comments = finish(proc, tmp_path)
    assert rc == 0
    assert published(comments[-1]).result() == {"checkpointed": True, "signals": [signal.SIGUSR1]}


@pytest.mark.parametrize(
    ("flags", "forward"),
    [(["BATCH_JOB"], True), (["FULL_JOB"], False), (["BATCH_JOB", "FULL_JOB"], False), ([], False)],
)
def test_the_flags_say_whether_the_wrapper_passes_the_warning_on(flags, forward):
    assert results.warning_of({"kill_warning_signal": "USR2", "kill_warning_flags": flags}) == ("USR2", forward)
    assert results.warning_of({"kill_warning_flags": flags}) == ("", False)
