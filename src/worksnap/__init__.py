"""worksnap: snapshot the whole working directory at every agent step, and rewind to any of them.

The public API::

    from worksnap import Workspace

    ws = Workspace("/path/to/project")
    manifest = ws.snapshot(step=3, kind="step")
    plan = ws.plan_restore(ws.load("step:3"))
    result = ws.apply(plan)

    with Session("/path/to/project", name="conv-8c1f", snapshots=True) as s:
        s.step(label=prompt)            # numbered steps: 0 on entry, then 1, 2, ...
        s.rewind(1)

Names are imported on first use, so `worksnap --help` and other light commands
do not pay for loading the engine.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not from typing: the daemon's client must not pay 9 ms to import it
if TYPE_CHECKING:
    from typing import Any

    from worksnap.apply import Result
    from worksnap.capture import DEFAULT_MAX_FILE_BYTES
    from worksnap.config import Retention
    from worksnap.errors import (
        ChangedError,
        ConflictError,
        InputError,
        LockError,
        ManifestError,
        ObjectError,
        RecoveryError,
        RestoreError,
        SnapshotError,
        StoreError,
        WorksnapError,
    )
    from worksnap.maintenance import GcReport
    from worksnap.manifest import Entry, Manifest, Summary
    from worksnap.plan import Change, Op, Plan
    from worksnap.progress import Progress
    from worksnap.session import Session
    from worksnap.workspace import Workspace

_HOMES = {
    "Result": "worksnap.apply",
    "ChangedError": "worksnap.errors",
    "ConflictError": "worksnap.errors",
    "InputError": "worksnap.errors",
    "LockError": "worksnap.errors",
    "ManifestError": "worksnap.errors",
    "ObjectError": "worksnap.errors",
    "RecoveryError": "worksnap.errors",
    "RestoreError": "worksnap.errors",
    "SnapshotError": "worksnap.errors",
    "StoreError": "worksnap.errors",
    "WorksnapError": "worksnap.errors",
    "Entry": "worksnap.manifest",
    "Manifest": "worksnap.manifest",
    "Summary": "worksnap.manifest",
    "Change": "worksnap.plan",
    "Op": "worksnap.plan",
    "Plan": "worksnap.plan",
    "Retention": "worksnap.config",
    "DEFAULT_MAX_FILE_BYTES": "worksnap.capture",
    "GcReport": "worksnap.maintenance",
    "Progress": "worksnap.progress",
    "Session": "worksnap.session",
    "Workspace": "worksnap.workspace",
}

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "Change",
    "ChangedError",
    "ConflictError",
    "Entry",
    "GcReport",
    "InputError",
    "LockError",
    "Manifest",
    "ManifestError",
    "ObjectError",
    "Op",
    "Plan",
    "Progress",
    "RecoveryError",
    "RestoreError",
    "Result",
    "Retention",
    "Session",
    "SnapshotError",
    "StoreError",
    "Summary",
    "WorksnapError",
    "Workspace",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'worksnap' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
