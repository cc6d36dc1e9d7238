# ruff: noqa: E501, RUF059, B905, SIM115, F841, C408
# Scratch prototypes behind the proposals in docs/performance.md: they monkeypatch or
# re-implement parts of worksnap outside src/ to measure a change before it is made.
"""Prototypes (outside src/): stat-cache format, plan diff fast path, manifest check
fast path, single-capture restore. Each prints today's time and the prototype's,
and checks the results are the same."""

from __future__ import annotations

import os
import re
import socket
import statistics
import sys
import time

sys.path.insert(0, "/work/wt-bench/src")
sys.path.insert(0, "/work/wt-bench/benchmarks")
import msgspec

import worksnap.manifest as wm
import worksnap.plan as wp
from worksnap.apply import apply_plan
from worksnap.fsio import write_atomic
from worksnap.lock import StoreLock
from worksnap.plan import Change, Op, Plan, ancestors
from worksnap.store import _unpack
from worksnap.workspace import Workspace, _Journal, _summarize

ROOT = "/tmp/worksnap-bench/ref/root"
STORE = "/tmp/worksnap-bench/proto-store"


def med(fn, n=5):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


# -- 1. stat cache format ------------------------------------------------------
def stat_cache(ws: Workspace) -> None:
    path = os.path.join(ws.store_dir, "cache", "stat")
    data = _unpack(open(path, "rb").read())  # a zstd frame since the cache was compressed
    typ = tuple[str, dict[str, tuple[tuple[int, int, int, int, int], str]]]
    dec = msgspec.msgpack.Decoder(typ)
    root, table = dec.decode(data)
    t_typed = med(lambda: dec.decode(data))
    t_untyped = med(lambda: msgspec.msgpack.decode(data))
    # columnar: paths list, one flat int list, raw 32-byte digests concatenated
    paths = list(table)
    ints = [v for k in table.values() for v in k[0]]
    digs = b"".join(bytes.fromhex(v[1]) for v in table.values())
    col = msgspec.msgpack.encode((root, paths, ints, digs))
    cdec = msgspec.msgpack.Decoder(tuple[str, list[str], list[int], bytes])

    def load_col():
        r, p, i, d = cdec.decode(col)
        return {
            path: (
                (i[5 * n], i[5 * n + 1], i[5 * n + 2], i[5 * n + 3], i[5 * n + 4]),
                d[32 * n : 32 * n + 32],
            )
            for n, path in enumerate(p)
        }

    def load_col_lazy():
        # keep columns; look up by index (dict path -> n) and compare key tuples lazily
        r, p, i, d = cdec.decode(col)
        return dict(zip(p, range(len(p))))

    enc = msgspec.msgpack.Encoder()
    print(
        f"stat cache: {len(table)} entries, {len(data) / 1e6:.1f} MB today, {len(col) / 1e6:.1f} MB columnar"
    )
    print(
        f"  decode typed (today) {t_typed * 1000:.0f} ms; untyped {t_untyped * 1000:.0f} ms; "
        f"columnar -> dict {med(load_col) * 1000:.0f} ms; columnar path->index {med(load_col_lazy) * 1000:.0f} ms"
    )
    print(f"  encode today {med(lambda: enc.encode((root, table))) * 1000:.0f} ms")


# -- 2. plan diff --------------------------------------------------------------
def fast_plan_restore(current, target, *, ignored_by_target):
    protected = {
        *current.ignored,
        *current.large,
        *current.excluded,
        *target.ignored,
        *target.large,
        *target.excluded,
    }

    def is_protected(path):
        return any(p in protected for p in ancestors(path)) if protected else False

    now_e = {e.path: e for e in current.entries}
    then_e = {e.path: e for e in target.entries}
    now_d = set(current.dirs)
    then_d = set(target.dirs)
    changes = []
    for path, entry in then_e.items():
        present = now_e.get(path)
        if (
            present is not None
            and present.type == entry.type
            and present.mode == entry.mode
            and present.hash == entry.hash
            and present.target == entry.target
        ):
            continue
        if is_protected(path):
            continue
        if present is None:
            if path in now_d:
                changes.append(Change(Op.MODIFIED, path, entry, was_dir=True))
            else:
                changes.append(Change(Op.DELETED, path, entry, was_dir=False))
        else:
            changes.append(Change(Op.MODIFIED, path, entry, was_dir=False))
    for path in then_d - now_d:
        if is_protected(path):
            continue
        if path in now_e:
            changes.append(Change(Op.MODIFIED, path, None, was_dir=False))
        else:
            changes.append(Change(Op.DELETED, path, None, was_dir=False))
    removed = {}
    for path in now_e.keys() - then_e.keys() - then_d:
        if not is_protected(path) and not ignored_by_target(path, False):
            removed[path] = False
    for path in now_d - then_d - then_e.keys():
        if not is_protected(path) and not ignored_by_target(path, True):
            removed[path] = True
    removed_dirs = {p for p, d in removed.items() if d}
    staying = set()
    if removed_dirs:
        for path in (*now_e, *now_d, *protected):
            if path in removed:
                continue
            for parent in ancestors(path.rpartition("/")[0]):
                if parent in removed_dirs:
                    staying.add(parent)
    for path, was_dir in removed.items():
        if path not in staying:
            changes.append(Change(Op.ADDED, path, None, was_dir=was_dir))
    changes.sort(key=lambda c: c.path)
    return Plan(target=target, current=current, changes=changes)


# -- 3. manifest checks -----------------------------------------------------------
_SAFE = re.compile(
    r"(?:[^/\x00\\.]|\.(?!\.?(?:/|$)))[^/\x00\\]*(?:/(?:[^/\x00\\.]|\.(?!\.?(?:/|$)))[^/\x00\\]*)*\Z"
)
_GIT = re.compile(r"(?:^|/)(?:\.git[. ]*|git~1)(?:/|$)", re.IGNORECASE)


def fast_check_relpath(path, what, source, *, allow_git=False):
    if (
        _SAFE.match(path)
        and not path.startswith("/")
        and (allow_git or not _GIT.search(path))
        and not (len(path) > 1 and path[1] == ":")
    ):
        return
    orig_check_relpath(path, what, source, allow_git=allow_git)


orig_check_relpath = wm._check_relpath


def single_capture_restore(ws: Workspace, ref: str):
    target = ws.load(ref)
    ws._ensure_store()
    with StoreLock(ws.store_dir, exclusive=True):
        current = ws.capture(store_objects=True)
        plan = ws._plan(current, target)
        for change in plan.changes:
            if change.entry is not None and change.entry.hash is not None:
                ws.store.read(change.entry.hash)
        pre = msgspec.structs.replace(current, kind="pre-restore", session=target.session)
        ws.store.save_manifest(pre, _summarize(pre))
        journal = os.path.join(ws.store_dir, "journal.json")
        write_atomic(
            journal,
            msgspec.json.encode(
                _Journal(
                    target=target.id, pre_restore=pre.id, pid=os.getpid(), host=socket.gethostname()
                )
            ),
        )
        result = apply_plan(ws.root, plan, ws.store.read)
        os.unlink(journal)
        ws._stat_cache = None
        return result


def main() -> None:
    from run import Edits

    ws = Workspace(ROOT, store=STORE)
    ref = ws.snapshot().id
    time.sleep(0.3)
    ws.snapshot()
    stat_cache(ws)

    edits = Edits(__import__("pathlib").Path(ROOT))
    edits.mad()
    time.sleep(0.2)
    target = ws.load(ref)
    current = ws.capture(store_objects=False)
    plan = ws._plan(current, target)
    gitignores = {}
    from worksnap.ignore import ignore_checker

    ign = ignore_checker(ws._base_rules(), gitignores)
    a = wp.plan_restore(current, target, ignored_by_target=ign)
    b = fast_plan_restore(current, target, ignored_by_target=ign)
    assert [(c.op, c.path, c.was_dir) for c in a.changes] == [
        (c.op, c.path, c.was_dir) for c in b.changes
    ]
    print(
        f"plan diff: {len(a.changes)} changes; today {med(lambda: wp.plan_restore(current, target, ignored_by_target=ign)) * 1000:.0f} ms; "
        f"fast path {med(lambda: fast_plan_restore(current, target, ignored_by_target=ign)) * 1000:.0f} ms (same changes)"
    )
    same = ws.capture(store_objects=False)
    print(
        f"  no-change diff: today {med(lambda: wp.plan_restore(same, same, ignored_by_target=ign)) * 1000:.0f} ms; "
        f"fast {med(lambda: fast_plan_restore(same, same, ignored_by_target=ign)) * 1000:.0f} ms"
    )

    kw = dict(root=ws._wire_root, store_rel=ws._store_rel, source=ref)
    t_check = med(lambda: wm.check_manifest(target, **kw))
    wm._check_relpath = fast_check_relpath
    t_fast = med(lambda: wm.check_manifest(target, **kw))
    wm._check_relpath = orig_check_relpath
    data = ws.store.manifest_bytes(ref)
    print(
        f"check_manifest: today {t_check * 1000:.0f} ms; regex fast path {t_fast * 1000:.0f} ms; "
        f"decode_manifest {med(lambda: wm.decode_manifest(data, ref)) * 1000:.0f} ms"
    )

    import zlib

    t_enc = med(lambda: wm.encode_manifest(target))
    z1 = zlib.compress(data, 1)
    t_z1 = med(lambda: zlib.compress(data, 1))
    t_unz = med(lambda: zlib.decompress(z1))
    print(
        f"manifest: {len(data) / 1e6:.1f} MB JSON (encode {t_enc * 1000:.0f} ms); zlib-1 {len(z1) / 1e6:.1f} MB "
        f"in {t_z1 * 1000:.0f} ms, inflate {t_unz * 1000:.0f} ms"
    )

    # restore: today vs single capture (alternating, M/A/D rebuilt each time)
    edits.reset()
    time.sleep(0.2)
    ws.snapshot()
    today, once = [], []
    for i in range(5):
        for which in ("t", "o") if i % 2 == 0 else ("o", "t"):
            edits.mad()
            os.sync()
            t = time.perf_counter()
            r = ws.restore(ref) if which == "t" else single_capture_restore(ws, ref)
            (today if which == "t" else once).append(time.perf_counter() - t)
            assert r.ok
            edits.check_clean(which)
    print(
        f"restore in-process: today {statistics.median(today):.3f} s; single capture {statistics.median(once):.3f} s"
    )


if __name__ == "__main__":
    main()
