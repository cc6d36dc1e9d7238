"""The daemon and the mounts around it: read-only stores, other mount namespaces, mountinfo.

Each test runs its processes under `unshare -m` (a mount namespace of their own, private:
nothing they mount is seen outside), so it needs to be allowed to (root, or a user
namespace); it is skipped, saying so, where it is not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parent.parent / "src")

pytestmark = pytest.mark.slow  # real mounts, daemons and client processes


def unshared(*command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs `command` in a mount namespace of its own; skips the test where that is not allowed."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) (util-linux) to make a mount namespace")
    unshare = ["unshare", "-m", "--propagation", "private"]
    probe = subprocess.run([*unshare, "mount", "-t", "tmpfs", "tmpfs", "/mnt"], check=False,
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"unshare -m (and mount in it) is not permitted here: {probe.stderr.strip()}")
    full_env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    full_env.update(PYTHONPATH=SRC, **(env or {}))
    return subprocess.run([*unshare, *command], capture_output=True, text=True, env=full_env,
                          timeout=120, check=False)  # fmt: skip


def test_a_mount_inside_a_root_whose_path_the_kernel_escapes_is_seen(tmp_path: Path) -> None:
    # mountinfo writes a space, tab, newline or backslash in a path as `\ooo`: each must
    # be decoded, or the mount below such a root is never looked at (a review).
    roots = [tmp_path / name for name in ("sp ace", "back\\slash", "tab\there", "new\nline")]
    script = (
        "import json, os, subprocess, sys\n"
        "from worksnap import autostart\n"
        "for root in sys.argv[1:]:\n"
        "    os.makedirs(root + '/m')\n"
        "    subprocess.run(['mount', '-t', 'ramfs', 'ramfs', root + '/m'], check=True)\n"
        "    print(json.dumps(autostart.unsound_file_system(root)))\n"
    )
    done = unshared(sys.executable, "-c", script, *map(str, roots))
    assert done.returncode == 0, done.stderr
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert said == [f"{root}/m is mounted inside the root (ramfs): inotify may miss changes there"
                    for root in roots]  # fmt: skip


def test_a_read_only_store_configured_for_a_daemon_runs_commands_as_without_one(
    tmp_path: Path,
) -> None:
    # Every command, even `list`, ended in a traceback trying to start the daemon (its
    # log and socket are in the store): a review.
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a")
    script = (
        'PY=$0 R=$1; ws() { "$PY" -m worksnap --root "$R" "$@"; }\n'
        "set -e\n"
        "WORKSNAP_NO_DAEMON=1 ws snapshot >/dev/null\n"
        "WORKSNAP_NO_DAEMON=1 ws config daemon true >/dev/null\n"
        'mount --bind "$R/.worksnap" "$R/.worksnap"\n'
        'mount -o remount,ro,bind "$R/.worksnap"\n'
        "set +e\n"
        'ws list >/dev/null 2>"$R.err"; echo "list $? $(wc -c <"$R.err")"\n'
        'ws status >/dev/null 2>"$R.err"; echo "status $? $(wc -c <"$R.err")"\n'
        'ws daemon status; echo "daemon-status $?"\n'
        'ws daemon start; echo "daemon-start $?"\n'
    )
    done = unshared("bash", "-c", script, sys.executable, str(root))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0:2] == ["list 0 0", "status 0 0"]  # as without a daemon: no word more
    assert lines[2:] == [
        f"no daemon is running for {root}/.worksnap",
        'automatic start: on, config.json says "daemon": true, but no daemon can serve it: '
        f"{root}/.worksnap is not writable here",
        "daemon-status 1",
        "daemon-start 1",
    ]
    said = done.stderr.splitlines()
    assert len(said) == 1, said  # `daemon start` fails, in one line
    assert said[0].startswith("worksnap: error: ") and "Read-only file system" in said[0]


def cli(root: Path, *args: str, no_daemon: bool = False) -> tuple[int, str, str]:
    """Runs `worksnap --root ROOT ARGS` here (in the test's own mount namespace)."""
    env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    env.update(PYTHONPATH=SRC, **({"WORKSNAP_NO_DAEMON": "1"} if no_daemon else {}))
    command = [sys.executable, "-m", "worksnap", "--root", str(root), *args]
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )
    return done.returncode, done.stdout, done.stderr


def test_a_client_in_another_mount_namespace_runs_its_command_itself(tmp_path: Path) -> None:
    # Served by the daemon, a sandbox's snapshot held the files outside the sandbox and
    # its restore rewrote the tree where the sandbox could not write (a review).
    root = tmp_path / "ws"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f").write_text("v1\n")
    code, out, err = cli(root, "--json", "snapshot")
    assert code == 0, err
    first = json.loads(out)["id"]
    (root / "a" / "f").write_text("v2\n")
    assert cli(root, "daemon", "start")[0] == 0
    try:
        script = (
            'PY=$0 R=$1; ws() { "$PY" -m worksnap --root "$R" "$@"; }\n'
            'mount -t tmpfs tmpfs "$R/a"; echo sandbox > "$R/a/f"\n'  # another a/ in here
            'ws --json snapshot >"$R.served"; echo "served $?"\n'
            'WORKSNAP_NO_DAEMON=1 ws --json snapshot >"$R.plain"; echo "plain $?"\n'
            'umount "$R/a"; mount --bind "$R" "$R"; mount -o remount,ro,bind "$R"\n'
            'ws restore --yes "$2" >/dev/null 2>&1; echo "restore $?"\n'
        )
        done = unshared("bash", "-c", script, sys.executable, str(root), first)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["served 0", "plain 0", "restore 1"], done.stderr
        served = json.loads(Path(f"{root}.served").read_text())
        plain = json.loads(Path(f"{root}.plain").read_text())
        assert served["tree"] == plain["tree"]  # the sandbox's own a/f
        assert (root / "a" / "f").read_text() == "v2\n"  # the read-only tree stayed as it was
        code, out, _ = cli(root, "--json", "daemon", "status")
        assert json.loads(out)["requests"] == 0  # it declined each time
        assert cli(root, "list")[0] == 0
        code, out, _ = cli(root, "--json", "daemon", "status")
        assert json.loads(out)["requests"] == 1  # and serves its own namespace
    finally:
        cli(root, "daemon", "stop")
