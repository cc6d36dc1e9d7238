"""Build the benchmark workspaces: the reference tree (from package registries) or a synthetic one.

Reference mode (default) lays out, under ``OUT/root``:

* ``py/<sdist>/``      pinned source distributions from PyPI (``pip download --no-binary``);
* ``web/vendor/<pkg>/`` pinned npm packages (``npm pack``): many small files, as a web
  front end vendoring an icon set has;
* a root ``.gitignore`` that ignores ``node_modules/``, ``.venv/``, ``__pycache__/``, ``*.pyc``;
* ``node_modules/``    ``npm install`` of a few large packages (ignored);
* ``.venv/``           a virtual environment with a few packages (ignored);
* ``__pycache__/``     byte-compiled files of two of the sdists (ignored).

Synthetic mode (``--synthetic N``) writes N captured files with a seeded generator:
log-normal sizes (median ~1.1 KB, a few up to 1.5 MB), nested directories, a few nested
``.gitignore`` files, and ignored ``node_modules/`` and ``__pycache__/`` content.
Used for the 10k / 50k / 200k scaling trees, and as the reference when offline.

The workspace must not live inside another git work tree: worksnap (like git)
applies the ignore rules of an enclosing repository, so a root under this
repository's ``benchmarks/work/`` (ignored here) would capture nothing. The default
output is therefore under ``/tmp``.

Examples::

    python benchmarks/build_workspace.py --out /tmp/worksnap-bench/ref
    python benchmarks/build_workspace.py --synthetic 50000 --out /tmp/worksnap-bench/syn50k
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

DEFAULT_BASE = Path("/tmp/worksnap-bench")

# Source distributions from PyPI, exact versions (file counts measured when chosen).
SDISTS = [
    "Django==5.0.6",  # 6.8k files, 57 MB (locale, docs, tests)
    "sympy==1.12",  # 1.9k files, 28 MB
    "ansible-core==2.16.6",  # 4.9k files, 24 MB
    "networkx==3.3",  # 0.9k files, 9 MB
]

# npm packages vendored into the captured tree (small files: SVG icons).
VENDORED_NPM = [
    "@mdi/svg@7.4.47",  # 7.5k files
    "@tabler/icons@3.5.0",  # 9.1k files
    "@material-design-icons/svg@0.14.13",  # 10.6k files
    "simple-icons@11.15.0",  # 3.2k files
    "bootstrap-icons@1.11.3",  # 2.1k files
]

# Installed into the ignored node_modules/ (about 10k files).
NODE_MODULES = {
    "typescript": "5.4.5",
    "@babel/core": "7.24.5",
    "@babel/preset-env": "7.24.5",
    "rxjs": "7.8.1",
    "date-fns": "3.6.0",
    "lodash": "4.17.21",
}

# Installed into the ignored .venv/ (with pip itself, about 3k files).
VENV_PACKAGES = ["setuptools==69.5.1", "pygments==2.18.0", "docutils==0.21.2"]

ROOT_GITIGNORE = """\
# dependencies and build output
node_modules/
.venv/
__pycache__/
*.pyc
*.egg-info/
build/
dist/
.DS_Store
"""


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def _safe_extract(tar: tarfile.TarFile, dest: Path, strip: int = 0) -> None:
    for member in tar.getmembers():
        parts = Path(member.name).parts[strip:]
        if not parts or member.issym() or member.islnk() or ".." in parts:
            continue
        target = dest.joinpath(*parts)
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            assert src is not None
            with open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(target, 0o755 if member.mode & 0o100 else 0o644)


def _norm(name: str) -> str:
    return name.lower().replace("-", "_")


def fetch_sdists(cache: Path) -> list[Path]:
    cache.mkdir(parents=True, exist_ok=True)
    archives = []
    for req in SDISTS:
        name, version = req.split("==")
        stem = _norm(f"{name}-{version}.tar.gz")

        def find(stem: str = stem) -> list[Path]:
            return [p for p in cache.iterdir() if _norm(p.name) == stem]

        if not find():
            run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    req,
                    "-d",
                    str(cache),
                ]
            )
        archives.append(find()[0])
    return archives


def fetch_npm(cache: Path) -> list[tuple[str, Path]]:
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for spec in VENDORED_NPM:
        name, _, version = spec.rpartition("@")
        tgz = cache / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
        if not tgz.exists():
            run(["npm", "pack", "--silent", spec], cwd=cache, stdout=subprocess.DEVNULL)
        out.append((name.lstrip("@").replace("/", "-"), tgz))
    return out


def build_reference(out: Path, cache: Path) -> Path:
    root = out / "root"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / ".gitignore").write_text(ROOT_GITIGNORE)
    (root / "README.md").write_text("Benchmark workspace built by benchmarks/build_workspace.py\n")
    for archive in fetch_sdists(cache / "pypi"):
        with tarfile.open(archive) as tar:
            _safe_extract(tar, root / "py")
    for name, tgz in fetch_npm(cache / "npm"):
        with tarfile.open(tgz) as tar:
            _safe_extract(tar, root / "web" / "vendor" / name, strip=1)
    # Ignored content: node_modules, .venv, __pycache__.
    (root / "package.json").write_text(
        json.dumps({"name": "bench-workspace", "private": True, "dependencies": NODE_MODULES})
        + "\n"
    )
    run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=root,
    )
    run([sys.executable, "-m", "venv", str(root / ".venv")])
    run(
        [str(root / ".venv" / "bin" / "pip"), "install", "-q", "--no-deps", *VENV_PACKAGES],
        stdout=subprocess.DEVNULL,
    )
    for pkg in ("sympy-1.12/sympy", "networkx-3.3/networkx"):
        run(
            [sys.executable, "-m", "compileall", "-q", str(root / "py" / pkg)],
            stdout=subprocess.DEVNULL,
        )
    return root


# -- synthetic ---------------------------------------------------------------

_WORDS = [
    "src",
    "lib",
    "core",
    "util",
    "test",
    "tests",
    "docs",
    "api",
    "model",
    "view",
    "handler",
    "service",
    "client",
    "server",
    "config",
    "data",
    "io",
    "parser",
    "render",
    "cache",
    "store",
    "index",
    "plugin",
    "schema",
    "types",
    "runtime",
    "build",
]
_EXTS = [".py", ".ts", ".js", ".md", ".json", ".txt", ".css", ".html", ".yaml", ".rs", ".svg"]


def _payload(rnd: random.Random, size: int) -> bytes:
    # Text-like (base64 lines): not compressible to nothing, not binary noise either.
    raw = base64.encodebytes(rnd.randbytes(size * 3 // 4 + 3))
    return raw[:size]


def _size(rnd: random.Random) -> int:
    if rnd.random() < 0.0005:
        return rnd.randint(200_000, 1_500_000)
    return min(int(rnd.lognormvariate(7.0, 1.1)), 1_000_000)  # median ~1.1 KB


def build_synthetic(out: Path, n_files: int, seed: int) -> Path:
    rnd = random.Random(seed)
    root = out / "root"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / ".gitignore").write_text(ROOT_GITIGNORE + "*.log\n")
    dirs: list[Path] = [root]
    written = 0
    while written < n_files:
        # Pick a parent biased towards recent (deeper) directories, make a new directory.
        parent = dirs[-1 - int(rnd.expovariate(0.15)) % len(dirs)]
        depth = len(parent.relative_to(root).parts)
        if depth >= 7:
            parent = root
        name = f"{rnd.choice(_WORDS)}_{len(dirs)}"
        directory = parent / name
        directory.mkdir()
        dirs.append(directory)
        if rnd.random() < 0.03:
            (directory / ".gitignore").write_text("*.tmp\ngenerated/\n")
            (directory / "scratch.tmp").write_bytes(_payload(rnd, 300))
            written += 1
        for i in range(min(max(1, int(rnd.expovariate(1 / 18))), n_files - written)):
            ext = rnd.choice(_EXTS)
            (directory / f"{rnd.choice(_WORDS)}_{i}{ext}").write_bytes(_payload(rnd, _size(rnd)))
            written += 1
        if rnd.random() < 0.05:
            (directory / "debug.log").write_bytes(_payload(rnd, 2000))  # ignored
    # Ignored bulk: node_modules (~20% of N) and __pycache__ next to .py files.
    nm = root / "node_modules"
    for i in range(n_files // 5):
        pkg = nm / f"pkg{i // 40}" / ("lib" if i % 3 else "dist")
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / f"m{i}.js").write_bytes(_payload(rnd, _size(rnd) // 2 + 10))
    for directory in dirs[1 : 1 + len(dirs) // 10]:
        cache = directory / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / "mod.cpython-311.pyc").write_bytes(_payload(rnd, 4000))
    return root


# -- counting ----------------------------------------------------------------


def count(root: Path) -> dict[str, int]:
    """Counts what git would capture (and what it ignores), without any git state left."""
    tmp = root.parent / ".count-git"
    if tmp.exists():
        shutil.rmtree(tmp)
    git = ["git", f"--git-dir={tmp}", f"--work-tree={root}"]
    subprocess.run(["git", "init", "-q", "--bare", str(tmp)], check=True)
    captured = subprocess.run(
        [*git, "ls-files", "-z", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        cwd=root,
    ).stdout.split(b"\0")
    ignored = subprocess.run(
        [*git, "ls-files", "-z", "--others", "--ignored", "--exclude-standard"],
        check=True,
        capture_output=True,
        cwd=root,
    ).stdout.split(b"\0")
    shutil.rmtree(tmp)
    captured = [p for p in captured if p]
    total = 0
    large = 0
    for rel in captured:
        st = os.lstat(os.path.join(os.fsencode(root), rel))
        if st.st_size > 2 << 20:
            large += 1
        else:
            total += st.st_size
    return {
        "captured_files": len(captured) - large,
        "captured_bytes": total,
        "large_files": large,
        "ignored_files": len([p for p in ignored if p]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="output directory (the tree goes in OUT/root)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_BASE / "cache")
    parser.add_argument("--synthetic", type=int, metavar="N", help="N synthetic captured files")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    start = time.monotonic()
    if args.synthetic:
        out = args.out or DEFAULT_BASE / f"syn{args.synthetic}"
        root = build_synthetic(out, args.synthetic, args.seed)
        kind = f"synthetic {args.synthetic} seed {args.seed}"
    else:
        out = args.out or DEFAULT_BASE / "ref"
        root = build_reference(out, args.cache)
        kind = "reference"
    counts = count(root)
    counts_out = {"kind": kind, "root": str(root), **counts}
    (out / "counts.json").write_text(json.dumps(counts_out, indent=1) + "\n")
    print(json.dumps(counts_out))
    print(f"built in {time.monotonic() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
