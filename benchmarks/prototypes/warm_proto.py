# ruff: noqa: RUF059, B905, PLW2901
# Scratch prototypes behind the proposals in docs/performance.md: they monkeypatch or
# re-implement parts of worksnap outside src/ to measure a change before it is made.
"""Prototype (outside src/): a warm capture with a per-directory cache, Entry reuse,
no store.has() on stat-cache hits, and optionally threaded lstat. Compares against
Workspace.capture on the same tree and checks the manifests are identical."""

from __future__ import annotations

import os
import stat as statmod
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, "/work/wt-bench/src")
from worksnap.manifest import Entry, tree_digest, wire_name
from worksnap.scan import _read_ignore_file
from worksnap.workspace import Workspace

ROOT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/worksnap-bench/ref/root"
STORE = sys.argv[2] if len(sys.argv) > 2 else "/tmp/worksnap-bench/proto-store"
MARGIN = 100_000_000


class DirInfo:
    __slots__ = ("dirs", "excluded", "files", "ignored", "key", "links", "rules", "subdirs")


class FastCapture:
    def __init__(self, ws: Workspace, threads: int = 0) -> None:
        self.ws = ws
        self.dircache: dict[str, DirInfo] = {}
        self.prev: dict[str, tuple[tuple, Entry]] = {}
        self.prev_sorted: list[Entry] | None = None
        self.prev_digest: str | None = None
        self.pool = ThreadPoolExecutor(threads) if threads else None
        self.threads = threads

    def _scan_dir(self, rel_dir, abs_dir, rules, key):
        info = DirInfo()
        info.key = key
        with os.scandir(abs_dir) as it:
            children = sorted(it, key=lambda e: e.name)
        child_rules = rules
        for c in children:
            if c.name == ".gitignore" and c.is_file(follow_symlinks=False):
                child_rules = rules.child(rel_dir, _read_ignore_file(c.path, rel_dir))
                break
        info.files, info.links, info.subdirs, info.ignored, info.excluded, info.dirs = (
            [],
            [],
            [],
            [],
            [],
            [],
        )
        for c in children:
            name = wire_name(c.name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if c.name == ".git" or rel in self.ws._exclude:
                info.excluded.append(rel)
                continue
            is_dir = c.is_dir(follow_symlinks=False)
            if child_rules.ignored(rel, is_dir=is_dir):
                info.ignored.append(rel)
            elif is_dir:
                info.dirs.append(rel)
                info.subdirs.append((rel, c.path))
            elif c.is_symlink():
                info.links.append((rel, c.path))
            else:
                info.files.append((rel, c.path))
        return info, child_rules

    def scan(self, trust_before: int):
        files, links, dirs, ignored, excluded = [], [], [], [], []
        pending = [("", self.ws.root, self.ws._base_rules())]
        seen_dirs = {}
        while pending:
            rel_dir, abs_dir, rules = pending.pop()
            st = os.lstat(abs_dir)
            # a .gitignore edited in place does not touch the directory: key on its stat too
            gi = os.path.join(abs_dir, ".gitignore")
            try:
                g = os.lstat(gi)
                gkey = (g.st_ino, g.st_mtime_ns, g.st_ctime_ns, g.st_size)
            except FileNotFoundError:
                gkey = None
            key = (
                st.st_ino,
                st.st_mtime_ns,
                st.st_ctime_ns,
                gkey,
                tuple(id(lv.spec) for lv in rules.levels),
            )
            info = self.dircache.get(rel_dir)
            if (
                info is None
                or info.key != key
                or not (st.st_mtime_ns < trust_before and st.st_ctime_ns < trust_before)
            ):
                info, child_rules = self._scan_dir(rel_dir, abs_dir, rules, key)
                info.rules = child_rules  # type: ignore[attr-defined]
            seen_dirs[rel_dir] = info
            files.extend(info.files)
            links.extend(info.links)
            dirs.extend(info.dirs)
            ignored.extend(info.ignored)
            excluded.extend(info.excluded)
            pending.extend((r, a, info.rules) for r, a in reversed(info.subdirs))  # type: ignore[attr-defined]
        self.dircache = seen_dirs
        return files, links, dirs, ignored, excluded

    def lstat_all(self, paths):
        if not self.pool:
            return [os.lstat(p) for p in paths]
        n = max(1, len(paths) // (self.threads * 4))
        chunks = [paths[i : i + n] for i in range(0, len(paths), n)]
        out = []
        for part in self.pool.map(lambda ch: [os.lstat(p) for p in ch], chunks):
            out.extend(part)
        return out

    def capture(self):
        ws = self.ws
        scan_start = time.time_ns()
        trust_before = scan_start - MARGIN
        files, links, dirs, ignored, excluded = self.scan(trust_before)
        stats = self.lstat_all([a for _, a in files])
        prev = self.prev
        fresh = {}
        entries = []
        changed = False
        large = []
        for (rel, _), st in zip(files, stats):
            if not statmod.S_ISREG(st.st_mode):
                excluded.append(rel)
                continue
            if st.st_size > ws.max_file_bytes:
                large.append(rel)
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            hit = prev.get(rel)
            if hit is not None and hit[0] == key:
                entry = hit[1]  # digest known stored: no has(), no new Entry
            else:
                changed = True
                digest, st2 = ws._hash_and_store(rel, store_objects=True)
                key = (st2.st_ino, st2.st_size, st2.st_mtime_ns, st2.st_ctime_ns, st2.st_mode)
                entry = Entry(
                    path=rel, type="file", mode=st2.st_mode & 0o777, hash=digest, size=st2.st_size
                )
                st = st2
            if st.st_mtime_ns < trust_before and st.st_ctime_ns < trust_before:
                fresh[rel] = (key, entry)
            entries.append(entry)
        for rel, path in links:
            entries.append(
                Entry(
                    path=rel,
                    type="symlink",
                    mode=os.lstat(path).st_mode & 0o777,
                    target=wire_name(os.readlink(path)),
                )
            )
        if len(fresh) != len(prev) or len(entries) != len(self.prev_sorted or ()):
            changed = True
        if not changed and self.prev_sorted is not None and links == []:
            entries = self.prev_sorted
            digest = self.prev_digest
        else:
            entries.sort(key=lambda e: e.path)
            dirs.sort()
            digest = tree_digest(entries, dirs)
        self.prev = fresh
        self.prev_sorted = entries
        self.prev_digest = digest
        ws.store.flush()
        return entries, digest


def main() -> None:
    ws = Workspace(ROOT, store=STORE)
    ws.snapshot()
    time.sleep(0.3)
    for threads in (0, 2, 4):
        fc = FastCapture(ws, threads)
        fc.capture()
        time.sleep(0.2)
        fc.capture()
        ref = ws.capture(store_objects=True)
        ents, dig = fc.capture()
        assert dig == ref.tree, (dig, ref.tree)
        base, new = [], []
        for _ in range(5):
            t = time.perf_counter()
            ws.capture(store_objects=True)
            base.append(time.perf_counter() - t)
            t = time.perf_counter()
            fc.capture()
            new.append(time.perf_counter() - t)
        print(
            f"threads={threads}: capture today {statistics.median(base):.3f} s; "
            f"prototype {statistics.median(new):.3f} s (identical tree digest)"
        )
    # the floor: lstat of every captured file alone
    paths = [os.path.join(ROOT, e.path) for e in ref.entries]
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        [os.lstat(p) for p in paths]
        ts.append(time.perf_counter() - t)
    print(f"floor: lstat of {len(paths)} files {statistics.median(ts):.3f} s")


if __name__ == "__main__":
    main()
