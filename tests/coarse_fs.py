"""A real file system with whole-second timestamps, for tests of racy writes.

ext4 made with 128-byte inodes (`mkfs.ext4 -I 128`) has no room for the
nanosecond parts of its times: mtime, ctime and atime are whole seconds, as on
ext3, FAT and some network mounts. Forcing whole-second mtimes with `os.utime`
on a normal file system is no substitute: ctime still moves in nanoseconds.

The image is loop-mounted once per test session. That needs root, loop devices,
`mkfs.ext4` (Debian's e2fsprogs) and `mount` (util-linux's mount); where any is
missing the fixture FAILS with what is missing: a skipped check would hide the
very bugs these tests are for. Nothing is installed here.

Use it from a test module (or a conftest) with
`from tests.coarse_fs import coarse_fs, coarse_tmp  # noqa: F401`; `coarse_tmp`
gives each test a fresh directory on the mount.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

IMAGE_BYTES = 64 << 20
_SBIN = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin"])


def _tool(name: str, package: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=_SBIN)
    if found is None:
        pytest.fail(f"coarse file system: `{name}` not found (Debian package {package})")
    return found


def _run(args: list[str], what: str) -> None:
    out = subprocess.run(
        args, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if out.returncode != 0:
        pytest.fail(f"coarse file system: {what} failed ({' '.join(args)}): {out.stderr.strip()}")


@contextlib.contextmanager
def mounted_coarse_fs(work: Path) -> Iterator[Path]:
    """Makes an ext4 image with 128-byte inodes in `work`, loop-mounts it, yields the mount.

    Unmounts and removes the image on the way out, whatever happened inside.
    `mount -o loop` lets go of its loop device at unmount (autoclear).
    """
    if os.geteuid() != 0:
        pytest.fail("coarse file system: loop-mounting an ext4 image needs root")
    mkfs = _tool("mkfs.ext4", "e2fsprogs")
    mount = _tool("mount", "mount")
    umount = _tool("umount", "mount")
    image = work / "coarse.img"
    point = work / "mnt"
    point.mkdir()
    with open(image, "wb") as f:
        f.truncate(IMAGE_BYTES)  # sparse: costs only what is written
    try:
        # -I 128: inodes without the extra space for nanoseconds (mkfs warns about 2038).
        _run([mkfs, "-q", "-F", "-I", "128", "-E", "nodiscard", str(image)], "mkfs.ext4")
        _run([mount, "-o", "loop", str(image), str(point)], "loop mount")
        try:
            _check_whole_seconds(point)
            yield point
        finally:
            out = subprocess.run([umount, str(point)], capture_output=True, check=False)
            if out.returncode != 0:  # still busy (a process left there): detach it anyway
                subprocess.run([umount, "-l", str(point)], capture_output=True, check=False)
    finally:
        image.unlink(missing_ok=True)


def _check_whole_seconds(point: Path) -> None:
    probe = point / ".probe"
    probe.write_bytes(b"x")
    st = os.stat(probe)
    probe.unlink()
    if st.st_mtime_ns % 10**9 or st.st_ctime_ns % 10**9:
        pytest.fail(f"coarse file system: {point} keeps sub-second times ({st.st_mtime_ns})")


@pytest.fixture(scope="session")
def coarse_fs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The mount point of a whole-second-timestamp ext4, for the whole session."""
    with mounted_coarse_fs(tmp_path_factory.mktemp("coarse")) as point:
        yield point


@pytest.fixture
def coarse_tmp(coarse_fs: Path) -> Path:
    """A fresh, empty directory on the coarse file system."""
    return Path(tempfile.mkdtemp(dir=coarse_fs))
