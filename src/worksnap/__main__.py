"""`python -m worksnap` and the `worksnap` script: the command line, in the daemon if one serves it.

Only the client (client.py) is imported until it is clear that the command runs
in this process.
"""

import sys


def main() -> int:
    """Runs the process's command line; returns the exit code."""
    from worksnap.client import run

    argv = sys.argv[1:]
    code, tried = run(argv)
    if code is not None:
        return code
    from worksnap.cli import main as run_here

    return run_here(argv, tried_daemon=tried)


if __name__ == "__main__":
    sys.exit(main())
