"""One way to skip a whole suite by an environment switch, loudly: tests/real_slurm and tests/standalone."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class SuiteSwitch:
    """``VAR=1`` skips every test under ``folder`` (except those ``keep`` keeps) and says so at both ends."""

    variable: str
    reason: str
    folder: Path
    keep: Callable[[pytest.Item], bool] = lambda item: False

    def requested(self) -> bool:
        return os.environ.get(self.variable, "") not in ("", "0")

    def report_header(self, config: pytest.Config) -> str | None:
        return f"!!! {self.reason}" if self.requested() else None

    def terminal_summary(self, terminalreporter: Any) -> None:
        if self.requested():
            terminalreporter.write_line(f"!!! {self.reason}", yellow=True, bold=True)

    def collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not self.requested():
            return
        skip = pytest.mark.skip(reason=self.reason)
        for item in items:
            if self.folder in Path(str(item.fspath)).resolve().parents and not self.keep(item):
                item.add_marker(skip)
