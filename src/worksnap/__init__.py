"""worksnap: snapshot the whole working directory at every agent step, and rewind to any of them.

The public API::

    from worksnap import Workspace

    ws = Workspace("/path/to/project")
    manifest = ws.snapshot(step=3, kind="step")
    plan = ws.plan_restore(ws.load("step:3"))
    result = ws.apply(plan)
"""

from worksnap.apply import Result
from worksnap.errors import (
    ConflictError,
    InputError,
    LockError,
    ManifestError,
    ObjectError,
    RestoreError,
    SnapshotError,
    WorksnapError,
)
from worksnap.manifest import Entry, Manifest, Summary
from worksnap.plan import Change, Op, Plan
from worksnap.workspace import DEFAULT_MAX_FILE_BYTES, Progress, Workspace

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "Change",
    "ConflictError",
    "Entry",
    "InputError",
    "LockError",
    "Manifest",
    "ManifestError",
    "ObjectError",
    "Op",
    "Plan",
    "Progress",
    "RestoreError",
    "Result",
    "SnapshotError",
    "Summary",
    "WorksnapError",
    "Workspace",
]
