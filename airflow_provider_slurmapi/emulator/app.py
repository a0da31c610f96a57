"""``SlurmJobApiEmulator``: the Slurm Job API of a Google Cloud training cluster, on loopback."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from airflow_provider_slurmapi.api.fields import DEFAULT_CONN_ID

from .auth import TokenAuthority, new_service_account, write_keyfile
from .cluster import Cluster
from .faults import FaultInjector
from .jobs import Job
from .metadata import MetadataServer
from .notation import hostlist
from .server import Call, EmulatorHTTPServer, Frontend
from .slurmrest import SlurmRest
from .status_page import render_job_page
from .upstream import UpstreamSlurm
from .versions import RELEASES

DEFAULT_PARTITIONS = {"debug": 4, "gpu": 2}
REPLY_SHAPES = ("structuredBody", "body")


class ProxyModeError(RuntimeError):
    """A helper that reads or drives the simulated cluster was called on an emulator in proxy mode."""


class SlurmJobApiEmulator:
    """A local callSlurmRestApi endpoint with Google auth, real job processes and Slurm's reply shapes.

    Use it as a context manager (``with SlurmJobApiEmulator() as emu: ...``) or call ``start``/``stop``.

    ``accounting_store_flags`` plays slurm.conf's ``AccountingStoreFlags``: like real Slurm by default,
    accounting keeps no job comment; ``("job_comment",)`` keeps it.

    ``reply_shape`` is how a reply carries Slurm's answer: ``"structuredBody"`` (default, a JSON object,
    as the translated API pages describe it) or ``"body"`` (a JSON-encoded string, as the English page
    does). Clients must read both.

    ``slurm_release`` is the Slurm the simulated cluster answers as: ``"24.11"`` (default, REST v0.0.40 to
    v0.0.42) or ``"26.05"`` (v0.0.42 to v0.0.45, in the shapes recorded from real slurmrestd 26.05.5).

    ``requeue_delay`` plays slurm.conf's ``AuthInfo=cred_expire``: the seconds a requeued job (``fail_job``
    with ``requeue``, ``requeue``) waits as PENDING (``BeginTime``) before it may run again; real Slurm's
    default is 120, the emulator's 0.

    Proxy mode (``upstream="http://slurm:6820"`` with ``upstream_user`` and ``upstream_token``, a
    slurmrestd JWT): the Google layer stays the emulator's (auth, 1 MB limit, NOT_FOUND /
    PERMISSION_DENIED, faults) and each Slurm call goes to that real slurmrestd as ``upstream_user``;
    the simulated cluster and the helpers that read it (``job``, ``jobs``, ``read_output``, ...) are off.

    Its jobs run as on a node of a Google Cloud cluster, with a metadata server: the emulator serves one on
    its own port (``metadata.py``: the node's service account ``node_service_account``, its token, the
    project) and puts ``GCE_METADATA_HOST`` and ``GCE_METADATA_IP`` (``metadata_host``,
    ``"127.0.0.1:PORT"``) in each job's environment. ``storage_emulator_host`` (e.g.
    ``"http://127.0.0.1:4443"``, a fake-gcs-server) becomes the jobs' ``STORAGE_EMULATOR_HOST``, where
    Google's Cloud Storage clients then go instead of Google. A job's own ``environment`` wins over both.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        project: str = "demo-project",
        region: str = "us-central1",
        cluster: str = "demo-cluster",
        partitions: dict[str, int] | None = None,
        default_partition: str = "debug",
        state_dir: str | Path | None = None,
        min_job_age: float = 300.0,
        minute_seconds: float = 60.0,
        accounting_delay: float = 0.0,
        token_lifetime: int = 3600,
        simulate: bool = False,
        allowed_principals: Iterable[str] | None = None,
        log_calls: bool = False,
        impersonation_targets: Iterable[str] | None = None,
        seed: int | None = None,
        completing_time: float = 0.3,
        kill_wait: float = 2.0,
        upstream: str | None = None,
        upstream_user: str | None = None,
        upstream_token: str | None = None,
        upstream_timeout: float = 60.0,
        accounting_store_flags: Iterable[str] = (),
        reply_shape: str = "structuredBody",
        slurm_release: str = "24.11",
        storage_emulator_host: str | None = None,
        requeue_delay: float = 0.0,
    ) -> None:
        if reply_shape not in REPLY_SHAPES:
            raise ValueError(f"reply_shape must be one of {REPLY_SHAPES}, got {reply_shape!r}")
        if slurm_release not in RELEASES:
            raise ValueError(f"slurm_release must be one of {tuple(RELEASES)}, got {slurm_release!r}")
        if not requeue_delay >= 0:
            raise ValueError(f"requeue_delay must be 0 or more seconds, got {requeue_delay!r}")
        self.slurm_release = slurm_release
        if upstream is not None and (not upstream_user or not upstream_token):
            raise ValueError("proxy mode needs upstream_user and upstream_token (a slurmrestd JWT for that user)")
        if upstream is not None and not upstream.startswith(("http://", "https://")):
            raise ValueError(f"upstream must be an http:// or https:// URL, got {upstream!r}")
        if storage_emulator_host is not None and not storage_emulator_host.startswith(("http://", "https://")):
            # google-cloud-storage uses the variable as the endpoint itself: without a scheme it cannot connect.
            raise ValueError(f"storage_emulator_host must be an http:// or https:// URL, got {storage_emulator_host!r}")
        self.storage_emulator_host = storage_emulator_host
        self.host = host
        self.port = port
        self.project = project
        self.region = region
        self.cluster = cluster
        self.partitions = dict(partitions or DEFAULT_PARTITIONS)
        if default_partition not in self.partitions:
            raise ValueError(f"default partition {default_partition!r} is not in {sorted(self.partitions)}")
        self.default_partition = default_partition
        self._own_state_dir = state_dir is None
        self.state_dir = Path(state_dir) if state_dir is not None else Path(tempfile.mkdtemp(prefix="slurmapi-emu-"))
        self._min_job_age = min_job_age
        self.minute_seconds = minute_seconds
        self.accounting_delay = accounting_delay
        self.token_lifetime = token_lifetime
        self.simulate = simulate
        self.log_calls = log_calls
        self.reply_shape = reply_shape
        self.service_account_email = f"airflow@{project}.iam.gserviceaccount.com"
        # The account the cluster's nodes run as: its token comes from the metadata server, for the jobs.
        self.node_service_account = f"slurm-node@{project}.iam.gserviceaccount.com"
        self.impersonation_targets = list(
            impersonation_targets
            if impersonation_targets is not None
            else [f"slurm-runner@{project}.iam.gserviceaccount.com"]
        )
        known = {self.service_account_email, *self.impersonation_targets}
        self.allowed_principals = set(allowed_principals) if allowed_principals is not None else set(known)
        self.faults = FaultInjector(seed)
        self._cluster = Cluster(
            name=cluster,
            partitions=self.partitions,
            default_partition=default_partition,
            state_dir=self.state_dir,
            min_job_age=min_job_age,
            minute_seconds=minute_seconds,
            accounting_delay=accounting_delay,
            simulate=simulate,
            completing_time=completing_time,
            kill_wait=kill_wait,
            accounting_store_flags=_store_flags(accounting_store_flags),
        )
        self._cluster.requeue_delay = float(requeue_delay)
        self._slurm = SlurmRest(self._cluster, slurm_release)
        self.upstream = upstream.rstrip("/") if upstream is not None else None
        self._upstream = (
            UpstreamSlurm(
                upstream, upstream_user or "", upstream_token or "", timeout=upstream_timeout, cluster_name=cluster
            )
            if upstream is not None
            else None
        )
        self._server: EmulatorHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._frontend: Frontend | None = None
        self._known_accounts = known
        self.endpoint = ""
        self.token_uri = ""
        self.key_path = ""
        self.keyfile_dict: dict[str, Any] = {}
        self.metadata_host = ""

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> SlurmJobApiEmulator:
        """Bind the port, write the service-account key file, start serving and scheduling."""
        if self._server is not None:
            return self
        authority = TokenAuthority("", self.token_lifetime)
        self._frontend = Frontend(
            project=self.project,
            region=self.region,
            cluster=self.cluster,
            authority=authority,
            slurm=self._upstream if self._upstream is not None else self._slurm,
            faults=self.faults,
            allowed_principals=self.allowed_principals,
            service_accounts=self._known_accounts,
            log_calls=self.log_calls,
            reply_shape=self.reply_shape,
            job_page=self._job_page if self._upstream is None else None,
            metadata=MetadataServer(
                self.project, self.node_service_account, authority, self.token_lifetime, self.log_calls
            ),
        )
        self._server = EmulatorHTTPServer((self.host, self.port), self._frontend)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://{self.host}:{self.port}"
        self.metadata_host = f"{self.host}:{self.port}"
        # google-auth (and Google's Go client) find the metadata server at GCE_METADATA_HOST; google-auth's
        # detection (google.auth.default()) pings GCE_METADATA_IP.
        self._cluster.node_environment = {
            "GCE_METADATA_HOST": self.metadata_host,
            "GCE_METADATA_IP": self.metadata_host,
        }
        if self.storage_emulator_host is not None:
            self._cluster.node_environment["STORAGE_EMULATOR_HOST"] = self.storage_emulator_host
        self.token_uri = f"{self.endpoint}/token"
        authority.token_uri = self.token_uri
        key = new_service_account(self.service_account_email)
        authority.add_key(key)
        self.keyfile_dict = key.keyfile_dict(self.project, self.token_uri)
        key_path = self.state_dir / "service-account-key.json"
        write_keyfile(key_path, self.keyfile_dict)
        self.key_path = str(key_path)
        if self._upstream is None:
            self._cluster.start()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="slurmapi-emulator-http"
        )
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, kill and reap every job process, join every thread; remove a temporary state dir."""
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._cluster.stop()
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> SlurmJobApiEmulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- connection helpers ----------------------------------------------------------------------

    def impersonation_url(self, email: str) -> str:
        """The ``iam_endpoint_override`` for google-auth's impersonated credentials of ``email``."""
        return f"{self.endpoint}/v1/projects/-/serviceAccounts/{email}:generateAccessToken"

    def connection_extra(self, **overrides: Any) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "project_id": self.project,
            "region": self.region,
            "cluster_id": self.cluster,
            "endpoint": self.endpoint,
            "key_path": self.key_path,
        }
        extra.update(overrides)
        return extra

    def connection_json(self, **overrides: Any) -> str:
        return json.dumps({"conn_type": "slurmapi", "extra": self.connection_extra(**overrides)})

    def connection_uri(self, **overrides: Any) -> str:
        return "slurmapi://?__extra__=" + quote(json.dumps(self.connection_extra(**overrides)), safe="")

    def airflow_env(self, conn_id: str = DEFAULT_CONN_ID, **overrides: Any) -> dict[str, str]:
        return {f"AIRFLOW_CONN_{conn_id.upper()}": self.connection_json(**overrides)}

    @property
    def job_link_template(self) -> str:
        """A ``job_link_template`` for the connection: the emulator's own page per job."""
        return f"{self.endpoint}/jobs/{{job_id}}"

    def _job_page(self, job_id: int) -> str | None:
        try:
            job = self.job(job_id)
        except KeyError:
            return None
        return render_job_page(job, self.read_output(job_id), self.cluster)

    def _simulated(self, what: str) -> None:
        if self._upstream is not None:
            raise ProxyModeError(
                f"{what}() reads the simulated cluster, which proxy mode does not use: this emulator forwards "
                f"Slurm calls to {self.upstream}; ask that cluster through the API instead"
            )

    # ---- inspection ------------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every callSlurmRestApi request so far: ``(method, slurm_path, http_status)``; 0 = no reply."""
        if self._frontend is None:
            return []
        with self._frontend.calls_lock:
            return list(self._frontend.calls)

    @property
    def token_requests(self) -> int:
        return self._frontend.authority.token_requests if self._frontend is not None else 0

    @property
    def metadata_requests(self) -> int:
        """Requests to the jobs' metadata server so far, refused ones included."""
        metadata = self._frontend.metadata if self._frontend is not None else None
        return metadata.requests if metadata is not None else 0

    def job(self, job_id: int) -> dict[str, Any]:
        """A snapshot of one job for tests; ``KeyError`` if the emulator never had it."""
        self._simulated("job")
        with self._cluster.lock:
            job = self._cluster.get(job_id)
            if job is None:
                raise KeyError(job_id)
            return _snapshot(job)

    def jobs(self) -> list[dict[str, Any]]:
        self._simulated("jobs")
        with self._cluster.lock:
            return [_snapshot(job) for job in self._cluster.all_jobs()]

    def wait_for_state(self, job_id: int, states: str | Iterable[str], timeout: float = 30.0) -> dict[str, Any]:
        """Block until the job's state is one of ``states``; ``TimeoutError`` otherwise.

        ``"CANCELLED"`` matches only the final ``["CANCELLED"]``; list ``"COMPLETING"`` too to match
        ``["CANCELLED", "COMPLETING"]``.
        """
        wanted = frozenset([states] if isinstance(states, str) else states)
        self._simulated("wait_for_state")
        with self._cluster.lock:
            return _snapshot(self._cluster.wait_for(job_id, wanted, timeout))

    def wait_for_purge(self, job_id: int, timeout: float = 30.0) -> dict[str, Any]:
        """Block until the job has left the active queue (MinJobAge or ``purge``)."""
        self._simulated("wait_for_purge")
        with self._cluster.lock:
            return _snapshot(self._cluster.wait_until(job_id, lambda job: not job.in_queue, timeout, "leave the queue"))

    @property
    def spawned_pids(self) -> list[int]:
        """Process ids of every batch script started so far (each one leads its own session)."""
        self._simulated("spawned_pids")
        with self._cluster.lock:
            return list(self._cluster.spawned_pids)

    def host_path(self, cluster_path: str) -> Path:
        """Where a cluster-side path (e.g. ``/home/user/slurm-5.out``) lives on this machine."""
        self._simulated("host_path")
        return self._cluster.host_path(cluster_path)

    def read_output(self, job_id: int, stream: str = "stdout") -> str:
        """The job's standard output (or ``stream="stderr"``) so far; ``""`` if nothing was written."""
        self._simulated("read_output")
        with self._cluster.lock:
            job = self._cluster.get(job_id)
            if job is None:
                raise KeyError(job_id)
            path = job.stdout_path if stream == "stdout" else job.stderr_path
        host = self.host_path(path)
        return host.read_text(encoding="utf-8", errors="replace") if host.exists() else ""

    # ---- faults and operator actions -------------------------------------------------------------

    def inject_fault(
        self,
        kind: str,
        count: int | None = 1,
        path_contains: str | None = None,
        method: str | None = None,
        delay: float = 1.0,
        probability: float = 1.0,
    ) -> None:
        """Arm a fault for the next ``count`` matching calls (``None``: until ``clear_faults``)."""
        self.faults.inject(kind, count, path_contains, method, delay, probability)

    def clear_faults(self) -> None:
        self.faults.clear()

    def set_slurmdbd_down(self, down: bool = True) -> None:
        self._simulated("set_slurmdbd_down")
        self._slurm.slurmdbd_down = down

    @property
    def min_job_age(self) -> float:
        """slurm.conf's ``MinJobAge``: seconds an ended job stays in the active queue. Setting it, like
        ``scontrol reconfigure`` after an edit, applies to the jobs that end from then on."""
        return self._min_job_age

    @min_job_age.setter
    def min_job_age(self, seconds: float) -> None:
        self._min_job_age = self._cluster.min_job_age = float(seconds)

    def purge(self, job_id: int) -> None:
        """Drop a job (or an array) from the active queue now, as MinJobAge would later."""
        self._simulated("purge")
        self._cluster.purge(job_id)

    def release_held(self) -> int:
        """Start the clock of the held simulated runs.

        A simulated job whose script says ``#EMULATOR hold=1`` runs (RUNNING) until this is called, and
        ends its ``runtime`` after it; returns how many runs were released. The benchmark uses it to start
        the job ends only once every waiting trigger polls.
        """
        self._simulated("release_held")
        return self._cluster.release_held()

    def fail_job(self, job_id: int, state: str = "NODE_FAIL", requeue: bool | None = False) -> None:
        """A running job's node fails (or it is preempted): ``state``, or back to PENDING for its next run if
        ``requeue`` and the job may be requeued (``requeue: false`` in its spec says it may not); ``None``:
        as Slurm does with JobRequeue=1, when the job may be. A requeued job starts again ``requeue_delay``
        seconds later, and accounting keeps its ended run as a record of its own."""
        self._simulated("fail_job")
        self._cluster.fail_job(job_id, state, requeue)

    def requeue(self, job_id: int) -> None:
        """An administrator's ``scontrol requeue``: a running job, or one that ended and is still in the
        active queue, goes back to PENDING for its next run (``requeue_delay`` seconds later). ``ValueError``
        when slurmctld would refuse (a pending job, one submitted with ``requeue: false``, one purged)."""
        self._simulated("requeue")
        with self._cluster.lock:
            job = self._cluster.get(job_id)
            if job is None or not job.in_queue:
                raise ValueError(f"scontrol requeue {job_id}: Invalid job id specified (not in the active queue)")
            refused = self._cluster.requeue(job)
        if refused:
            raise ValueError(f"scontrol requeue {job_id}: {refused}")

    def expire_tokens(self) -> None:
        """Invalidate every access token issued so far: the next call with one gets 401."""
        if self._frontend is not None:
            self._frontend.authority.expire_all()


def _snapshot(job: Job) -> dict[str, Any]:
    req = job.request
    return {
        "job_id": job.job_id,
        "name": req.name,
        "state": list(job.state),
        "reason": job.reason,
        "exit_code": job.return_code,
        "signal": job.signal,
        "exit_status": job.exit_status,
        "partition": req.partition,
        "nodes": list(job.nodes),
        "node_list": hostlist(job.nodes),
        "comment": req.comment,
        "standard_output": job.stdout_path,
        "standard_error": job.stderr_path,
        "working_directory": req.current_working_directory,
        "array_job_id": job.array_job_id or None,
        "array_task_id": job.array_task_id,
        "dependency": req.dependency,
        "hold": job.held,
        "time_limit": req.time_limit,
        "restart_cnt": job.restart_cnt,
        "submit_time": job.submit_time,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "user": job.user,
        "pid": job.proc.pid if job.proc is not None else None,
        "in_queue": job.in_queue,
    }


# slurm.conf AccountingStoreFlags values that change what the emulator's accounting answers.
STORE_FLAGS = frozenset({"job_comment", "job_extra", "job_env", "job_script"})


def _store_flags(flags: Iterable[str]) -> frozenset[str]:
    chosen = frozenset(f.strip().lower() for f in ([flags] if isinstance(flags, str) else flags) if f.strip())
    unknown = chosen - STORE_FLAGS
    if unknown:
        raise ValueError(f"accounting_store_flags: unknown {sorted(unknown)}; known: {sorted(STORE_FLAGS)}")
    return chosen
