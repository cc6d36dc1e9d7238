"""Config: `config.json` in the store, the settings that apply to every command on it.

The one reader of that file, and a strict one: an unknown field, a value of the wrong
type or a size or duration that does not parse is refused with one clear error when
the file is read, never half-applied (a snapshot reads it before it stores anything).
`worksnap config KEY VALUE` changes it through `with_setting` and `Workspace.change_config`.
"""

from __future__ import annotations

import re

import msgspec

from worksnap.errors import ForeignStoreError, InputError, StoreError
from worksnap.storedir import MIB, StoreDir

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)\Z")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\Z")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_duration(text: str) -> float:
    """Parses `90s`, `45m`, `12h`, `30d`, `2w` (or plain seconds) into seconds."""
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise InputError(f"bad duration {text!r}: use a number and s, m, h, d or w (e.g. 30d)")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def parse_size(text: str) -> int:
    """Parses `500M`, `2G`, `10KiB`, `1024` (binary units) into bytes."""
    match = _SIZE.match(text.strip().lower())
    if not match:
        raise InputError(f"bad size {text!r}: use a number and K, M, G or T (e.g. 5G)")
    return int(float(match.group(1)) * 1024 ** _POWERS[match.group(2)])


def format_size(size: int) -> str:
    """The shortest exact spelling `parse_size` reads back: `64M`, `1536K`, `1000`."""
    for unit, power in (("T", 4), ("G", 3), ("M", 2), ("K", 1)):
        if size and size % 1024**power == 0:
            return f"{size // 1024**power}{unit}"
    return str(size)


class Retention(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A retention policy; a field left None sets no limit on that axis."""

    keep_last: int | None = None
    max_age: str | None = None
    max_bytes: str | None = None

    def is_empty(self) -> bool:
        """True when the policy limits nothing."""
        return self.keep_last is None and self.max_age is None and self.max_bytes is None

    def check(self) -> None:
        """Refuses a limit that does not parse, or a negative count.

        Raises:
            InputError: names the field.
        """
        if self.keep_last is not None and self.keep_last < 0:
            raise InputError(f"keep_last {self.keep_last} is negative")
        if self.max_age is not None:
            parse_duration(self.max_age)
        if self.max_bytes is not None:
            parse_size(self.max_bytes)


REMOTE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}\Z")
"""A remote's name: a letter, then letters, digits, `_` and `-` (never a ref like `step:3`)."""


class RemoteSetting(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One remote of `worksnap remote add`: where it is (credentials never: the environment's)."""

    url: str


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """The store's settings; every field is optional."""

    retention: Retention = msgspec.field(default_factory=Retention)
    """Applied after every snapshot, and by `gc` without options."""
    daemon: bool | None = None
    """`true`: every command that finds no daemon starts one; `false`: never; absent (or
    null): where it is sound and pays, Linux, a local file system, a big enough tree
    (autostart.py)."""
    max_file_bytes: int | str | None = None
    """The size cap of new snapshots: bytes, or a size such as "64M" (None: 2 MiB)."""
    hooks_block: bool = False
    """A failing `worksnap hook` blocks the agent's turn (exit 2) instead of only warning."""
    exclude: list[str] = []
    """Exclusion rules for every snapshot and restore (`exclusion.py`): a path relative to
    the root, or a .gitignore-style pattern when it has `*`, `?` or `[` or is a name and a
    `/` (`exclusion.is_pattern`)."""
    remotes: dict[str, RemoteSetting] = {}
    """The remotes by name (`worksnap remote add`); changed by `with_remote`/`without_remote`."""

    def cap(self) -> int | None:
        """The size cap in bytes (None: not set)."""
        if self.max_file_bytes is None:
            return None
        if isinstance(self.max_file_bytes, str):
            return parse_size(self.max_file_bytes)
        return self.max_file_bytes

    def check(self) -> None:
        """Refuses a value of the right type that still makes no sense (see `load_config`)."""
        self.retention.check()
        cap = self.cap()
        if cap is not None and cap < 0:
            raise InputError(f"max_file_bytes {cap} is negative")
        for rule in self.exclude:
            if not rule.strip() or rule.startswith("!") or any(c in rule for c in "\0\n\r"):
                raise InputError(f"exclude {rule!r} is not a path or pattern worksnap takes")
        for name, remote in self.remotes.items():
            check_remote_name(name)
            if "@" in remote.url.partition("://")[2].partition("/")[0]:
                raise InputError(f"remote {name}: a URL with a credential in it is refused")


def load_config(store: StoreDir) -> Config:
    """Returns the store's config (the defaults when it has none).

    Raises:
        InputError: the file is unreadable, not JSON, or holds an unknown field or value.
        StoreError: it is not a regular file (a symlink, a FIFO...).
    """
    path = store.paths.config
    try:
        data = store.read_optional(path, limit=MIB)
        if data is None:
            return Config()
        config = msgspec.json.decode(data, type=Config)
        config.check()
    except ForeignStoreError:
        raise  # about the store, not its config
    except (OSError, msgspec.DecodeError, InputError) as exc:
        raise InputError(f"config {path} is not valid ({exc})") from None
    return config


def configured_exclusions(store: StoreDir) -> list[str]:
    """The store's exclusion rules; none when config.json is damaged (`load_config` says so)."""
    try:
        return load_config(store).exclude
    except (InputError, StoreError):
        return []


def check_remote_name(name: str) -> None:
    """Refuses a remote name that is not `REMOTE_NAME` or is `latest` (a ref's word)."""
    if not REMOTE_NAME.match(name) or name == "latest":
        raise InputError(
            f"remote name {name!r}: use a letter, then letters, digits, '_' or '-' "
            "(not 'latest', which names a snapshot)"
        )


SETTINGS = ("max-file-bytes", "daemon", "keep-last", "max-age", "max-bytes", "hooks-block")
"""The keys of `worksnap config`, in the order it lists them.

config.json also holds `exclude` (`worksnap config exclude`) and `remotes` (name to
`{"url": ...}`, `worksnap remote add|remove`), each written by its own command.
"""


def get_setting(config: Config, key: str) -> object:
    """The value of one `worksnap config` key (None: not set)."""
    _check_key(key)
    if key == "max-file-bytes":
        return config.cap()
    if key == "daemon":
        return config.daemon
    if key == "hooks-block":
        return config.hooks_block
    value: object = getattr(config.retention, key.replace("-", "_"))
    return value


def with_setting(config: Config, key: str, value: str) -> Config:
    """`config` with one `worksnap config` key set; every other setting kept.

    `value` is what a person types: a size (`64M`), a duration (`30d`), a count,
    `true`/`false`, or `none` to clear the setting.

    Raises:
        InputError: unknown key, or a value that does not parse.
    """
    _check_key(key)
    cleared = value.strip().lower() in ("none", "null", "")
    retention = config.retention
    if key == "max-file-bytes":
        config = msgspec.structs.replace(
            config, max_file_bytes=None if cleared else parse_size(value)
        )
    elif key == "daemon":
        word = value.strip().lower()
        if word not in ("true", "false", "none", "null", "auto", ""):
            raise InputError(f"daemon must be true, false or none (automatic), not {value!r}")
        daemon = None if word not in ("true", "false") else word == "true"
        config = msgspec.structs.replace(config, daemon=daemon)
    elif key == "hooks-block":
        if value.lower() not in ("true", "false", "none"):
            raise InputError(f"{key} must be true or false, not {value!r}")
        config = msgspec.structs.replace(config, hooks_block=value.lower() == "true")
    elif key == "keep-last":
        count = None if cleared else _count(value)
        _keeps_some(key, value, count)
        retention = msgspec.structs.replace(retention, keep_last=count)
    elif key == "max-age":
        if not cleared:
            _keeps_some(key, value, parse_duration(value))
        retention = msgspec.structs.replace(retention, max_age=None if cleared else value)
    else:
        if not cleared:
            _keeps_some(key, value, parse_size(value))
        retention = msgspec.structs.replace(retention, max_bytes=None if cleared else value)
    return msgspec.structs.replace(config, retention=retention)


def _keeps_some(key: str, value: str, amount: float | None) -> None:
    """Refuses a retention setting that keeps nothing: every snapshot would drop the rest.

    (0 reads as "no limit" to many; a review set `max-age 0` and its next snapshot
    silently dropped the session's history. `gc --keep-last 0` asks for `--all`.)
    """
    if amount == 0:
        raise InputError(
            f"{key} {value} would keep no snapshot but pinned ones, dropping the rest at every "
            f"snapshot: `worksnap config {key} none` clears the setting; `worksnap gc "
            "--keep-last 0 --all` drops them once"
        )


def with_exclusions(config: Config, *, add: list[str], remove: list[str]) -> Config:
    """`config` with exclusion rules added and removed; every other setting kept.

    A rule already there is not added twice; removing one that is not there is refused.

    Raises:
        InputError: a rule to remove is not there.
    """
    rules = list(config.exclude)
    for rule in remove:
        if rule not in rules:
            shown = ", ".join(rules) or "none"
            raise InputError(f"exclude {rule!r} is not in this store's config (it has: {shown})")
        rules.remove(rule)
    rules += [rule for rule in dict.fromkeys(add) if rule not in rules]
    return msgspec.structs.replace(config, exclude=rules)


def with_remote(config: Config, name: str, url: str) -> Config:
    """`config` with a remote added.

    Raises:
        InputError: a bad name, or one already there.
    """
    check_remote_name(name)
    if name in config.remotes:
        raise InputError(
            f"remote {name} exists already ({config.remotes[name].url}); "
            f"remove it first: worksnap remote remove {name}"
        )
    remotes = {**config.remotes, name: RemoteSetting(url=url)}
    return msgspec.structs.replace(config, remotes=remotes)


def without_remote(config: Config, name: str) -> Config:
    """`config` with a remote removed.

    Raises:
        InputError: no remote of that name.
    """
    if name not in config.remotes:
        raise InputError(f"no remote {name!r} (see: worksnap remote list)")
    remotes = {k: v for k, v in config.remotes.items() if k != name}
    return msgspec.structs.replace(config, remotes=remotes)


def save_config(store: StoreDir, config: Config) -> Config:
    """Writes `config` to the store's config.json (atomically); returns it.

    Raises:
        InputError: a setting that does not check (`Config.check`).
    """
    config.check()
    store.write(store.paths.config, msgspec.json.format(msgspec.json.encode(config)) + b"\n")
    return config


def _check_key(key: str) -> None:
    if key not in SETTINGS:
        raise InputError(f"unknown setting {key!r}: use one of {', '.join(SETTINGS)}")


def _count(value: str) -> int:
    if not value.strip().isdigit():
        raise InputError(f"bad count {value!r}: use a whole number")
    return int(value)
