"""In-memory manifests for table tests of the pure functions (no files, no store)."""

from __future__ import annotations

from worksnap.hash import hash_bytes
from worksnap.manifest import VERSION, Entry, Manifest, Summary, tree_digest
from worksnap.paths import ancestors

Spec = str | tuple[str, str] | tuple[str, str, int]
"""A path's content: file text, ("link", target), ("file", text, mode), or "/" for a dir."""


def entry(path: str, spec: Spec) -> Entry:
    """The entry a spec describes (a file's digest is of its text)."""
    if isinstance(spec, str):
        spec = ("file", spec, 0o644)
    if spec[0] == "link":
        return Entry(path=path, type="symlink", mode=0o777, target=spec[1])
    text, mode = spec[1], spec[2] if len(spec) == 3 else 0o644  # type: ignore[misc]
    data = text.encode()
    return Entry(path=path, type="file", mode=mode, hash=hash_bytes(data), size=len(data))


def tree(
    paths: dict[str, Spec],
    *,
    snapshot_id: str = "000000000000",
    kind: str = "manual",
    time: str = "2026-01-01T00:00:00.000000Z",
    ignored: tuple[str, ...] = (),
    large: tuple[str, ...] = (),
    excluded: tuple[str, ...] = (),
    absent: tuple[str, ...] = (),
    step: int | None = None,
    session: str = "default",
) -> Manifest:
    """A manifest of `paths`; the directories above every path are added."""
    dirs = {p for p, spec in paths.items() if spec == "/"}
    for path in paths:
        dirs.update(ancestors(path.rpartition("/")[0]))
    entries = sorted(
        (entry(p, spec) for p, spec in paths.items() if spec != "/"), key=lambda e: e.path
    )
    ordered = sorted(dirs)
    return Manifest(
        version=VERSION,
        id=snapshot_id,
        root="/project",
        kind=kind,
        step=step,
        time=time,
        max_file_bytes=1 << 21,
        tree=tree_digest(entries, ordered),
        session=session,
        entries=entries,
        dirs=ordered,
        ignored=sorted(ignored),
        large=sorted(large),
        excluded=sorted(excluded),
        absent=sorted(absent),
    )


def summary(snapshot_id: str, of: Manifest, *, second: int, kind: str = "manual") -> Summary:
    """The summary of a snapshot of the tree `of` holds, taken `second` seconds past the hour."""
    return Summary(
        id=snapshot_id,
        step=None,
        kind=kind,
        time=f"2026-01-01T00:00:{second:02d}.000000Z",
        tree=of.tree,
        files=len(of.entries),
        bytes=sum(e.size or 0 for e in of.entries),
    )
