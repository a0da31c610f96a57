"""A total deadline for one blocking ``requests`` call: urllib3 bounds each socket read, never the call.

A reply trickled a byte at a time restarts a per-read timeout forever, and urllib3 advises a watcher
thread for a wall-clock limit. :class:`Deadline` is that watcher for one try: the connections of a
:class:`DeadlineAdapter` report to the deadline running in their thread when they connect or start a
request, and when it expires the deadline shuts their socket down, which ends a blocked read at once.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from typing import Any

from requests.adapters import HTTPAdapter

_RUNNING = threading.local()


class Deadline:
    """Cuts the connection of the request made in this thread once ``seconds`` have passed.

    Use as a context manager around one try; ``expired`` tells afterwards whether the cut happened, so
    that the error it caused reads as a timeout.
    """

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sock: socket.socket | None = None
        self._done = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        _RUNNING.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
        _RUNNING.deadline = None

    def watch(self, sock: socket.socket) -> None:
        """Follow ``sock``, the socket this thread's request uses; cut it now if the time is up."""
        with self._lock:
            self._sock = sock
            if self.expired:
                _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._sock is not None:
                _shutdown(self._sock)


def _shutdown(sock: socket.socket) -> None:
    # The plain socket's shutdown, also under TLS: it wakes the reader without touching the TLS state.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watched:
    """Mixed into urllib3's connection classes: report to the running :class:`Deadline`, if any."""

    def _report(self) -> None:
        # The socket itself: once the reply's head is read, http.client hands it to the response.
        deadline = getattr(_RUNNING, "deadline", None)
        sock = getattr(self, "sock", None)
        if deadline is not None and sock is not None:
            deadline.watch(sock)

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._report()

    def putrequest(self, *args: Any, **kwargs: Any) -> None:
        self._report()
        super().putrequest(*args, **kwargs)  # type: ignore[misc]


@functools.cache
def _watched_pool(pool_cls: Any) -> Any:
    if issubclass(pool_cls.ConnectionCls, _Watched):  # a proxy manager is handed out again, already watched
        return pool_cls
    connection_cls = type(f"Watched{pool_cls.ConnectionCls.__name__}", (_Watched, pool_cls.ConnectionCls), {})
    return type(f"Watched{pool_cls.__name__}", (pool_cls,), {"ConnectionCls": connection_cls})


def _watch_pools(manager: Any) -> Any:
    manager.pool_classes_by_scheme = {
        scheme: _watched_pool(pool_cls) for scheme, pool_cls in manager.pool_classes_by_scheme.items()
    }
    return manager


class DeadlineAdapter(HTTPAdapter):
    """``requests``' adapter whose connections, direct or through a proxy, can be cut by a :class:`Deadline`."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _watch_pools(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        return _watch_pools(super().proxy_manager_for(proxy, **proxy_kwargs))
