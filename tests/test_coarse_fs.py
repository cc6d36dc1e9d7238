"""The coarse file system fixture gives what racy-write tests need: whole-second times."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .coarse_fs import coarse_fs, coarse_tmp  # noqa: F401  (fixtures)


def stat_key(path: Path) -> tuple[int, int, int, int, int]:
    """What a stat cache compares to decide that a file did not change."""
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def test_times_are_whole_seconds(coarse_tmp: Path) -> None:  # noqa: F811
    made = [coarse_tmp / "file", coarse_tmp / "dir", coarse_tmp / "dir" / "inner"]
    made[0].write_bytes(b"data")
    made[1].mkdir()
    made[2].write_bytes(b"")
    os.symlink("file", coarse_tmp / "link")
    for path in [*made, coarse_tmp / "link"]:
        st = os.lstat(path)
        assert st.st_mtime_ns % 10**9 == 0, path
        assert st.st_ctime_ns % 10**9 == 0, path
        assert st.st_atime_ns % 10**9 == 0, path


def test_a_same_size_rewrite_in_the_same_second_changes_no_stat_field(
    coarse_tmp: Path,  # noqa: F811
) -> None:
    path = coarse_tmp / "racy.txt"
    for _ in range(20):  # retried only if a second boundary fell between the writes
        before = time.time()
        path.write_bytes(b"one")
        first = stat_key(path)
        path.write_bytes(b"two")
        second = stat_key(path)
        after = time.time()
        # Away from the boundary by more than the kernel's coarse clock can lag.
        if int(before) == int(after) and before % 1 > 0.05 and after % 1 < 0.95:
            break
        time.sleep(0.1)
    else:
        pytest.fail("never managed two writes inside one second")
    assert path.read_bytes() == b"two"
    assert second == first  # mtime and ctime unchanged: only the bytes tell


def test_the_mount_is_the_same_for_the_session(coarse_fs: Path, coarse_tmp: Path) -> None:  # noqa: F811
    assert coarse_tmp.parent == coarse_fs
    assert os.path.ismount(coarse_fs)
    assert os.listdir(coarse_tmp) == []


NOT_ROOT = r"""
import sys
from pathlib import Path
from tests.coarse_fs import mounted_coarse_fs
try:
    with mounted_coarse_fs(Path(sys.argv[1])):
        print("mounted")
except BaseException as exc:  # pytest.fail raises an exception of its own
    print(type(exc).__name__, exc)
"""


def test_without_root_the_fixture_fails_and_says_why(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(work, 0o777)
    top = str(Path(__file__).resolve().parents[1])
    # setpriv (util-linux, on every Debian machine) runs it as nobody.
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    out = subprocess.run(
        [*nobody, sys.executable, "-c", NOT_ROOT, str(work)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": top},
    )
    expected = "Failed coarse file system: loop-mounting an ext4 image needs root\n"
    assert out.stdout == expected, out.stderr
