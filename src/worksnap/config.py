"""Config: `config.json` in the store, the settings that apply to every command on it.

The one reader of that file, and a strict one: an unknown field or a value of the
wrong type is refused with one clear error, never half-applied.
"""

from __future__ import annotations

import msgspec

from worksnap.errors import InputError
from worksnap.storedir import MIB, StoreDir


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
    daemon: bool = False
    """Start `worksnap daemon` on the first command that finds none."""


def load_config(store: StoreDir) -> Config:
    """Returns the store's config (the defaults when it has none).

    Raises:
        InputError: the file is unreadable, not JSON, or holds an unknown field or value.
        StoreError: it is not a regular file (a symlink, a FIFO...).
    """
    path = store.paths.config
    try:
        data = store.read_optional(path, limit=MIB)
        return Config() if data is None else msgspec.json.decode(data, type=Config)
    except (OSError, msgspec.DecodeError) as exc:
        raise InputError(f"config {path} is not valid ({exc})") from None
