"""Backends by URL: `open_transport` turns `s3://bucket/prefix` or `file:///path` into a transport.

Above the backends (it picks one), so each backend imports only `transport.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from worksnap.errors import InputError
from worksnap.remote.transport import Transport, is_key


def open_transport(url: str, *, environ: Mapping[str, str] | None = None) -> Transport:
    """Opens the remote store `url` names; no request is made until the first operation.

    `file:///abs/path` is a directory (shared disk, tests); `s3://bucket/prefix`
    is an S3-compatible store, reached with endpoint, region and credentials from
    the standard AWS environment and files (see `worksnap.remote.aws`), read from
    `environ` (default `os.environ`). The S3 client is imported only here.

    Raises:
        InputError: the URL is not one of those forms (the message never repeats
            a credential written into it).
    """
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise InputError(
            f"remote URL {parts.scheme}://…@{parts.netloc.rpartition('@')[2]}{parts.path}: "
            "credentials do not belong in a URL; set them in the AWS environment or files"
        )
    if parts.query or parts.fragment:
        raise InputError(f"remote URL {url}: no query or fragment is allowed")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InputError(
                f"remote URL {url}: a file URL needs an absolute path (file:///path, three slashes)"
            )
        path = unquote(parts.path)
        if not path.startswith("/") or "\0" in path:
            raise InputError(f"remote URL {url}: a file URL needs an absolute path")
        from worksnap.remote.directory import DirectoryTransport

        return DirectoryTransport(path)
    if parts.scheme == "s3":
        prefix = parts.path.strip("/")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", parts.netloc):
            raise InputError(
                f"remote URL {url}: {parts.netloc!r} is not a valid bucket name "
                "(3 to 63 lowercase letters, digits, dots and dashes)"
            )
        if prefix and not is_key(prefix):
            raise InputError(
                f"remote URL {url}: the prefix may hold only letters, digits, '.', '_', '-', "
                "'=' and '/' (no empty segment, none starting with '.')"
            )
        try:
            from worksnap.remote.s3 import open_s3
        except ImportError:
            raise InputError(
                f"remote URL {url}: s3:// needs the S3 client: pip install 'worksnap[s3]'"
            ) from None
        return open_s3(parts.netloc, prefix, environ=environ)
    raise InputError(
        f"remote URL {url}: worksnap speaks s3://bucket/prefix and file:///path, nothing else"
    )
