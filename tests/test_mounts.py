"""The mount table as the kernel writes it: its escapes, and the mounts at or inside a root."""

from __future__ import annotations

from worksnap.mounts import parse, unescape, untrusted

TABLE = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "40 22 0:40 / /w/a\\040b\\011c\\012d\\134e rw shared:2 - tmpfs tmpfs rw\n"
    "41 40 0:41 / /w/a\\040b\\011c\\012d\\134e/in rw shared:3 master:1 - fuse.sshfs h:/x rw\n"
    "42 22 0:42 / /w/a\\040b\\011c\\012d\\134eX rw - nfs4 h:/y rw\n"
    "43 22 0:43 / /w/other rw - nfs4 h:/z rw\n"
)
ROOT = "/w/a b\tc\nd\\e"


def test_every_escape_the_kernel_writes_is_decoded() -> None:
    assert unescape("a\\040b\\011c\\012d\\134e") == ROOT.removeprefix("/w/")
    assert unescape("plain\\x") == "plain\\x"  # not an escape: kept as it is


def test_the_mounts_at_or_inside_a_root_are_found_whatever_its_name() -> None:
    """A root whose path has a space, tab, newline or backslash: its mounts were missed
    (only `\\040` was decoded), and a neighbour whose name starts with the root's is not
    inside it (stop 42's review)."""
    found = parse(TABLE.encode(), ROOT)
    assert {(i, kind) for i, _, kind in found} == {("40", "tmpfs"), ("41", "fuse.sshfs")}
    assert untrusted(found) == f"{ROOT}/in is mounted inside the root (fuse.sshfs): " + (
        "inotify may miss changes there"
    )
    assert untrusted(parse(TABLE.encode(), "/w/other")) is not None
    assert untrusted(parse(TABLE.encode(), "/elsewhere")) is None
