"""Command-line PATHs, read as git reads them where argparse alone cannot.

Everything after the first `--` of a command that takes PATHs is a PATH, a `--` or a
`-x` too. argparse drops a second `--` from a list of positionals, so `restore REF --
--` came back with no PATH, which means the whole tree; so the words after `--` never
reach it as they are, only marked (`_LITERAL`) as words no option can be. And an option
may come between REF and the PATHs, as in git (`restore REF --yes src`). Used by
`arguments.parse`; the standard library and `client` only, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from worksnap.client import VALUED_GLOBALS

PATHS = {
    "show": "paths", "cat": "path", "plan": "paths", "restore": "paths", "capture": "paths",
    "diff": "paths",  # (its PATHs after `--` are `paths_after`: see `split`)
}  # fmt: skip
"""The commands whose last positionals are PATHs, and their names in the namespace."""

_LITERAL = "\0"
"""Marks a word that came after `--` (no argument can hold a NUL): a PATH, never an option."""


def split(argv: list[str]) -> tuple[list[str], list[str] | None, bool]:
    """The words for argparse, `diff`'s PATHs after `--`, and whether `--` ended the options.

    `diff` keeps its own: what follows its `--` is `paths_after` (a path after `--`
    could otherwise be taken for a ref). The other commands that take PATHs get the
    words after their `--` as marked positionals.
    """
    at = _command_index(argv)
    if at is None or argv[at] not in PATHS or "--" not in argv[at:]:
        return argv, None, False
    cut = argv.index("--", at)
    if argv[at] == "diff":
        return argv[:cut], argv[cut + 1 :], True
    return argv[:cut] + [_LITERAL + word for word in argv[cut + 1 :]], None, True


def take_paths(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str], *, dashdash: bool
) -> None:
    """Puts the PATHs argparse handed back into the command's list; refuses the rest.

    A REF or an option's value after `--` is refused (git reads what follows as paths).
    `restore REF --` with no PATH after it restores nothing, as `git restore
    --source=REF --` refuses ("you must specify path(s)"): never the whole tree, which a
    script's empty list would otherwise ask for; `plan` previews a restore, so it
    refuses it too. `show REF --` shows everything, as `git show REF --` does.
    """
    name = PATHS.get(args.command)
    value: Any = getattr(args, name) if name is not None else None
    many = isinstance(value, (list, tuple))  # (cat takes one PATH)
    rest = [word for word in extra if not (many and _is_path(word))]
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(_plain(word) for word in rest)}")
    if name is None:
        return
    for key, word in vars(args).items():  # a REF, or an option's value (`--to -- x`)
        if key != name and isinstance(word, str) and word.startswith(_LITERAL):
            what = "its REF" if key == "ref" else f"the value of --{key.replace('_', '-')}"
            parser.error(f"{args.command}: {what} comes before `--` (what follows is PATHs)")
    if not many:
        setattr(args, name, _plain(value))
        return
    paths = [_plain(word) for word in [*value, *extra]]
    if dashdash and not paths and (verb := args.command) in ("plan", "restore"):
        parser.error(f"{verb}: no PATH after `--` (leave out `--` to {verb} the whole tree)")
    setattr(args, name, paths)


def _is_path(word: str) -> bool:
    """A word argparse handed back that is a PATH: after `--`, or not an option.

    argparse takes the positionals before an option all at once, so the PATHs after
    one (`restore REF --yes src`, as git takes it) come back unrecognized.
    """
    return word.startswith(_LITERAL) or word == "-" or not word.startswith("-")


def _plain(word: str) -> str:
    return word.removeprefix(_LITERAL)


def _command_index(argv: list[str]) -> int | None:
    """Where the command's name is in `argv` (the first word that is not a global option)."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return None
        if _valued(word):
            i += 2
            continue
        if not word.startswith("-"):
            return i
        i += 1
    return None


def _valued(word: str) -> bool:
    """A global option whose value is the next word: `--root`, or a prefix argparse takes.

    (`--ro`: a review found `--sess S restore REF -- --` restoring the whole tree, the
    value taken for the command.) An ambiguous prefix is argparse's error anyway.
    """
    return len(word) > 2 and "=" not in word and any(v.startswith(word) for v in VALUED_GLOBALS)
