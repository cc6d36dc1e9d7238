"""Config: `config.json` in the store, the settings that apply to every command on it.

The one reader of that file, and a strict one: an unknown field or a value of the
wrong type is refused with one clear error, never half-applied.
"""

from __future__ import annotations

import msgspec

from worksnap.errors import InputError
from worksnap.layout import StorePaths


class Retention(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A retention policy; a field left None sets no limit on that axis."""

    keep_last: int | None = None
    max_age: str | None = None
    max_bytes: str | None = None

    def is_empty(self) -> bool:
        """True when the policy limits nothing."""
        return self.keep_last is None and self.max_age is None and self.max_bytes is None


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The store's settings; every field is optional."""

    retention: Retention = msgspec.field(default_factory=Retention)
    """Applied after every snapshot, and by `gc` without options."""
    daemon: bool | None = None
    """`true`: every command that finds no daemon starts one; `false`: never; absent (or
    null): where it is sound and pays, Linux, a local file system, a big enough tree
    (autostart.py)."""


def load_config(paths: StorePaths) -> Config:
    """Returns the store's config (the defaults when it has none).

    Raises:
        InputError: the file is unreadable, not JSON, or holds an unknown field or value.
    """
    try:
        with open(paths.config, "rb") as f:
            return msgspec.json.decode(f.read(), type=Config)
    except FileNotFoundError:
        return Config()
    except (OSError, msgspec.DecodeError) as exc:
        raise InputError(f"config {paths.config} is not valid ({exc})") from None
