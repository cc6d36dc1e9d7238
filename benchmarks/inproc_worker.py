"""A long-lived worksnap process driven over stdin/stdout, for the in-process scenarios.

One JSON request per line, one JSON answer per line. The time reported is measured
here, around the API call only, on one `Workspace` object kept for the whole session
(what an agent runtime that embeds worksnap does).

Requests: {"op": "open", "root": R, "store": S, "watch": false}, {"op": "snapshot"},
{"op": "plan", "ref": ID}, {"op": "restore", "ref": ID}, {"op": "quit"}.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main() -> int:
    import worksnap

    ws: worksnap.Workspace | None = None
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        answer: dict[str, object] = {}
        if op == "open":
            ws = worksnap.Workspace(
                req["root"], store=req["store"], watch=bool(req.get("watch", False))
            )
            # watch=True falls back to plain scans where inotify is missing: say so.
            answer["watching"] = ws.watching
        elif op == "quit":
            break
        else:
            assert ws is not None
            start = time.perf_counter()
            if op == "snapshot":
                manifest = ws.snapshot()
                answer["id"] = manifest.id
                answer["tree"] = manifest.tree
            elif op == "plan":
                plan = ws.plan_restore(ws.load(req["ref"]))
                answer["changes"] = len(plan.changes)
                answer["tree"] = plan.current.tree
            elif op == "restore":
                result = ws.restore(req["ref"])
                answer["ok"] = result.ok
                answer["restored"] = len(result.restored)
            else:
                raise ValueError(op)
            answer["t"] = time.perf_counter() - start
        answer["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    if ws is not None:
        ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
