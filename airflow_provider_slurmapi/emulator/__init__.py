"""A local emulator of the Slurm Job API (callSlurmRestApi) of Google Cloud training clusters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import SlurmJobApiEmulator
    from .server import Call

__all__ = ["Call", "SlurmJobApiEmulator"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that loading the pytest plugin (this package) costs nothing until it is used.
    if name == "SlurmJobApiEmulator":
        from .app import SlurmJobApiEmulator

        return SlurmJobApiEmulator
    if name == "Call":
        from .server import Call

        return Call
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
