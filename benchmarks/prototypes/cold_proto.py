# ruff: noqa: E501
# Scratch prototypes behind the proposals in docs/performance.md: they monkeypatch or
# re-implement parts of worksnap outside src/ to measure a change before it is made.
"""Cold snapshot prototypes (monkeypatches, outside src/): (1) Store.has skips the loose-object
lstat for objects below 1 MiB (they are never loose); (2) pack appends buffered to 1 MiB writes."""

import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, "/work/wt-bench/src")
import worksnap.store as st
from worksnap.hash import SMALL
from worksnap.workspace import Workspace

ROOT = "/tmp/worksnap-bench/ref/root"
orig_has, orig_append, orig_flush = st.Store.has, st._PackWriter.append, st.Store.flush


def add_fast(self, digest, data):  # same as Store.add, but only consults loose objects for big data
    idx = self._load_index()
    if digest in idx or (len(data) >= SMALL and os.path.exists(self._loose_path(digest))):
        return False
    self.added += 1
    if len(data) >= SMALL:
        st.write_atomic(self._loose_path_dir(digest), data)
        return True
    if self._writer is None:
        self._writer = st._PackWriter(self._packs)
        self._writer.buf = bytearray()
    w = self._writer
    w.buf += data
    w.records.append((digest, w.offset, len(data)))
    idx[digest] = (w.name, w.offset, len(data))
    w.offset += len(data)
    if len(w.buf) >= 1 << 20:
        os.write(w.fd, w.buf)
        w.buf = bytearray()
    return True


def flush_fast(self):
    w = self._writer
    if w is not None and getattr(w, "buf", None):
        view = memoryview(w.buf)
        while view:
            view = view[os.write(w.fd, view) :]
        w.buf = bytearray()
    orig_flush(self)


orig_add = st.Store.add


def cold(variant):
    shutil.rmtree("/tmp/worksnap-bench/proto-cold-store", ignore_errors=True)
    if variant == "proto":
        st.Store.add, st.Store.flush = add_fast, flush_fast
    else:
        st.Store.add, st.Store.flush = orig_add, orig_flush
    os.sync()
    t = time.perf_counter()
    m = Workspace(ROOT, store="/tmp/worksnap-bench/proto-cold-store").snapshot()
    el = time.perf_counter() - t
    return el, m.tree


res = {"today": [], "proto": []}
trees = set()
cold("today")
for i in range(4):
    for v in ("today", "proto") if i % 2 == 0 else ("proto", "today"):
        el, tree = cold(v)
        res[v].append(el)
        trees.add(tree)
assert len(trees) == 1
print({k: [round(x, 2) for x in v] for k, v in res.items()})
print(
    f"cold in-process: today {statistics.median(res['today']):.2f} s, prototype {statistics.median(res['proto']):.2f} s (same tree digest)"
)
