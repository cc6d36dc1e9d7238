"""Views: results as the JSON documents `--json` prints (README, "JSON contract").

The one place that decides their shape: the command line prints them, and any
other front end (an MCP server, a web hook) should return the same documents.
Each function takes results of the API and returns plain dicts and lists, ready
for `json.dumps`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command line imports this module before it needs the engine
    from worksnap.apply import Result
    from worksnap.diff import FileChange
    from worksnap.maintenance import GcReport
    from worksnap.manifest import Entry, Manifest, Summary
    from worksnap.plan import Plan

View = dict[str, Any]


def snapshot_view(manifest: Manifest, *, new_objects: int) -> View:
    """`snapshot`: the new snapshot, counted (`new_objects`: objects it stored)."""
    return {
        "id": manifest.id,
        "step": manifest.step,
        "kind": manifest.kind,
        "time": manifest.time,
        "label": manifest.label,
        "tree": manifest.tree,
        "files": len(manifest.entries),
        "bytes": sum(e.size or 0 for e in manifest.entries),
        "new_objects": new_objects,
        "dirs": len(manifest.dirs),
        "ignored": len(manifest.ignored),
        "large": len(manifest.large),
        "excluded": len(manifest.excluded),
    }


def summary_view(summary: Summary) -> View:
    """One row of `list`."""
    return {
        "id": summary.id,
        "step": summary.step,
        "kind": summary.kind,
        "time": summary.time,
        "label": summary.label,
        "session": summary.session,
        "files": summary.files,
        "bytes": summary.bytes,
        "changed": summary.changed,
        "tree": summary.tree,
    }


def plan_view(plan: Plan) -> View:
    """`plan` and `restore --dry-run`: the target and every change, sorted by path."""
    return {
        "target": plan.target.id,
        "changes": [{"op": c.op.value, "path": c.path} for c in plan.changes],
    }


def result_view(result: Result) -> View:
    """`restore`, `rewind`, `undo`, `redo`: what was done, and any failure."""
    return {
        "target": result.target,
        "restored": result.restored,
        "not_restored": result.not_restored,
        "error": result.error,
        "rolled_back": result.rolled_back,
        "pre_restore": result.pre_restore,
        "blocked": result.blocked,
    }


def recover_view(result: Result | None) -> View:
    """`recover`: whether an interrupted restore was rolled back, and how."""
    if result is None:
        return {"recovered": False}
    return {"recovered": True, **result_view(result)}


def verify_view(problems: list[str]) -> View:
    """`verify`: one line per problem."""
    return {"ok": not problems, "problems": problems}


def begin_view(checkpoint: Manifest) -> View:
    """`begin`: the checkpoint opened."""
    return {
        "id": checkpoint.id,
        "step": checkpoint.step,
        "kind": checkpoint.kind,
        "time": checkpoint.time,
        "label": checkpoint.label,
    }


def capture_view(checkpoint: Manifest) -> View:
    """`capture`: what the open checkpoint holds now."""
    return {
        "id": checkpoint.id,
        "captured": [e.path for e in checkpoint.entries],
        "absent": checkpoint.absent,
        "large": checkpoint.large,
    }


def gc_view(report: GcReport) -> View:
    """`gc`: what was removed."""
    return {"snapshots": report.snapshots, "objects": report.objects, "bytes": report.bytes}


def pin_view(snapshot_id: str, *, pinned: bool) -> View:
    """`pin` and `unpin`."""
    return {"id": snapshot_id, "pinned": pinned}


def du_view(sessions: dict[str, tuple[int, int]], *, store_bytes: int) -> View:
    """`du`: snapshots and referenced bytes per session, and the store's size."""
    return {
        "sessions": {
            name: {"snapshots": count, "bytes": size} for name, (count, size) in sessions.items()
        },
        "store_bytes": store_bytes,
    }


def rebind_view(root: str, *, snapshots: int) -> View:
    """`rebind`: the root the store is bound to now."""
    return {"root": root, "snapshots": snapshots}


def diff_view(changes: list[FileChange], read: Callable[[Entry], bytes]) -> list[View]:
    """`diff`: one row per changed path, with line counts (None for binary content)."""
    from worksnap.diff import line_counts

    rows: list[View] = []
    for change in changes:
        counts = line_counts(change, read)
        rows.append(
            {
                "op": change.op,
                "path": change.path,
                "from": change.old_path,
                "added": counts[0] if counts else None,
                "deleted": counts[1] if counts else None,
                "binary": counts is None,
            }
        )
    return rows


def daemon_status_view(status: dict[str, Any] | None) -> View:
    """`daemon status` (and `start`): whether one serves the store, and its own report."""
    status = status or {}
    return {"running": bool(status), **status}


def daemon_stop_view(*, stopped: bool) -> View:
    """`daemon stop`."""
    return {"stopped": stopped}
