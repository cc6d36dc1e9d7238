"""Reproduces a bug found while benchmarking watch mode (src/ is not changed here).

With ``Workspace(..., watch=True)``, ``plan_restore`` captures the tree without storing
objects (``capture(store_objects=False)``) and remembers that capture. If nothing
changes before the next ``snapshot()``, the watcher reports a quiet tree and the
snapshot reuses the remembered capture as is, so a file whose new content was first
seen by the plan is recorded with a digest whose object was never stored:
``verify`` reports it missing, and restoring that snapshot would fail.

    PYTHONPATH=src python benchmarks/repro_watch_plan_snapshot.py

Prints the ``verify`` problems (empty when the bug is fixed) and exits 1 if any.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from worksnap import Workspace


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "d").mkdir(parents=True)
        (root / "d" / "a.txt").write_text("first\n")
        ws = Workspace(root, store=Path(tmp) / "store", watch=True)
        ref = ws.snapshot().id
        time.sleep(0.2)  # past the racy-timestamp margin
        (root / "d" / "a.txt").write_text("content no snapshot has seen\n")
        time.sleep(0.2)
        plan = ws.plan_restore(ws.load(ref))  # sees the new content, stores nothing
        snap = ws.snapshot()  # quiet tree since the plan: reuses the plan's capture
        problems = ws.verify(snap.id)
        ws.close()
    print(f"plan changes: {len(plan.changes)}; verify {snap.id}: {problems or 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
