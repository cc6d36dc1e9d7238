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
    from worksnap.config import Config
    from worksnap.diff import FileChange
    from worksnap.maintenance import GcReport
    from worksnap.manifest import Entry, Manifest, Summary
    from worksnap.migration import UpgradeReport
    from worksnap.plan import Plan, Unprotected
    from worksnap.runwrap import Outcome

View = dict[str, Any]


def snapshot_view(
    manifest: Manifest,
    *,
    total_bytes: int,
    new_objects: int,
    large: list[tuple[str, int | None]] | None = None,
) -> View:
    """`snapshot`: the new snapshot, counted (`new_objects`: objects it stored).

    `total_bytes`: its files' bytes (`Workspace.total_bytes`: summed once per root tree).

    `large`: the files it left out as large, with their size (`Workspace.large_files`).
    """
    return {
        "id": manifest.id,
        "step": manifest.step,
        "kind": manifest.kind,
        "time": manifest.time,
        "label": manifest.label,
        "tree": manifest.tree,
        "files": len(manifest.entries),
        "bytes": total_bytes,
        "new_objects": new_objects,
        "dirs": len(manifest.dirs),
        "ignored": len(manifest.ignored),
        "large": len(manifest.large),
        "excluded": len(manifest.excluded),
        "max_file_bytes": manifest.max_file_bytes,
        "large_files": [{"path": path, "size": size} for path, size in large or []],
    }


def summary_view(summary: Summary, *, pinned: bool = False) -> View:
    """One row of `list`."""
    from worksnap.history import is_automatic

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
        "pinned": pinned,
        "automatic": is_automatic(summary.kind),
    }


def plan_view(plan: Plan) -> View:
    """`plan` and `restore --dry-run`: the target and every change, sorted by path."""
    return {
        "target": plan.target.id,
        "changes": [{"op": c.op.value, "path": c.path} for c in plan.changes],
        "unprotected": _unprotected_view(plan.unprotected),
    }


def _unprotected_view(rows: list[Unprotected]) -> list[View]:
    """The files in no snapshot a restore leaves as they are (`Plan.unprotected`)."""
    return [{"path": u.path, "why": u.why, "size": u.size} for u in rows]


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
        "unprotected": _unprotected_view(result.unprotected),
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
        "ignored": checkpoint.ignored,
    }


def extract_view(result: Result, *, to: str) -> View:
    """`restore --to DIR`: like `restore`, and where it wrote."""
    return {**result_view(result), "to": to}


def extract_plan_view(plan: Plan, *, to: str) -> View:
    """`restore --to DIR --dry-run`: like `plan` (every change `D`, a path made), and where."""
    return {**plan_view(plan), "to": to}


def gc_view(report: GcReport) -> View:
    """`gc`: what was removed (or, with `--dry-run`, would be)."""
    return {
        "snapshots": report.snapshots,
        "objects": report.objects,
        "bytes": report.bytes,
        "dropped": list(report.dropped),
        "dry_run": report.dry_run,
        "estimate": report.estimate,
        "unswept": report.unswept,
    }


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


def upgrade_view(report: UpgradeReport) -> View:
    """`upgrade`: the snapshots migrated to format 2, and the format 1 ones left as they were."""
    return {
        "migrated": list(report.migrated),
        "finished": list(report.finished),
        "left": list(report.left),
        "dry_run": report.dry_run,
    }


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


def status_view(
    *,
    root: str,
    found: str,
    store: str,
    store_exists: bool,
    session: str,
    mine: list[Summary],
    everyone: list[Summary],
    store_bytes: int,
    latest: Manifest | None,
    changes: list[FileChange],
    large: list[tuple[str, int | None]],
    max_file_bytes: int,
    daemon: dict[str, Any] | None,
    ignored_now: list[tuple[str, int | None]] | None = None,
    daemon_configured: bool | None,
    daemon_start: tuple[str, bool, str],
    recovery_pending: bool,
    restore_running: bool = False,
    unreadable: list[str] | None = None,
) -> View:
    """`status`: where worksnap works from here, and what changed since `latest`.

    `restore_running`: the journal is there because its restore still runs in another
    process (then `recovery_pending` is False: nothing was interrupted). `unreadable`:
    a line for each snapshot that could not be read (added later). `newest`: the session's
    newest snapshot, automatic ones too (`latest` is the newest of the others; added later).
    `ignored_now`: files `latest` holds, changed since, that the ignore rules leave out now
    (a restore leaves them, no snapshot keeps them; added later).
    """
    return {
        "root": root,
        "found": found,
        "store": store,
        "store_exists": store_exists,
        "session": session,
        "snapshots": len(mine),
        "snapshots_total": len(everyone),
        "store_bytes": store_bytes,
        "latest": latest.id if latest is not None else None,
        "newest": {"id": mine[0].id, "kind": mine[0].kind} if mine else None,
        "max_file_bytes": max_file_bytes,
        "large": [{"path": path, "size": size} for path, size in large],
        "ignored_now": [{"path": path, "size": size} for path, size in ignored_now or []],
        "daemon": {
            **daemon_status_view(daemon),
            "configured": daemon_configured,
            "mode": daemon_start[0],
            "starts": daemon_start[1],
            "reason": daemon_start[2],
        },
        "recovery_pending": recovery_pending,
        "restore_running": restore_running,
        "changes": [{"op": c.op, "path": c.path, "from": c.old_path} for c in changes],
        "unreadable": unreadable or [],
    }


def config_view(config: Config, *, max_file_bytes: int, store: str) -> View:
    """`config`: the store's settings (`max_file_bytes` as in force, the default filled in)."""
    retention = config.retention
    return {
        "store": store,
        "max_file_bytes": max_file_bytes,
        "daemon": config.daemon,
        "keep_last": retention.keep_last,
        "max_age": retention.max_age,
        "max_bytes": retention.max_bytes,
        "hooks_block": config.hooks_block,
        "exclude": list(config.exclude),
    }


def run_view(outcome: Outcome, *, rewind: View | None = None) -> View:
    """`run`: the command's exit status and the snapshots taken around it.

    `rewind`: with `--rewind N`, the rewind's own document (`result_view`), else None.
    """
    return {
        "command": outcome.command,
        "exit_code": outcome.exit_code,
        "error": outcome.error,
        "snapshots": [{"id": m.id, "kind": m.kind} for m in outcome.snapshots],
        "rewind": rewind,
    }
