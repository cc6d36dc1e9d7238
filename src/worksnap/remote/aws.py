"""Endpoint, region and credentials for S3, from the standard AWS environment and files only.

Each is taken from the first place that has it, in the order of the AWS CLI:

- endpoint: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, then `endpoint_url` of the
  profile in the config file; none: AWS itself.
- region: `AWS_REGION`, `AWS_DEFAULT_REGION`, then `region` of the profile; none: us-east-1.
- credentials: `AWS_ACCESS_KEY_ID` with `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`),
  then the profile's keys in the credentials file, then in the config file.

The profile is `AWS_PROFILE`, or `default`; the files are `AWS_SHARED_CREDENTIALS_FILE`
(default `~/.aws/credentials`) and `AWS_CONFIG_FILE` (default `~/.aws/config`).
Nothing else is asked: no instance metadata service, no SSO, no `credential_process`
(a profile that has only those is refused with a message that says so). worksnap
never writes these files and never prints a credential; `S3Settings` keeps the
secrets out of its `repr`.
"""

from __future__ import annotations

import configparser
import dataclasses
import os
from collections.abc import Mapping

from worksnap.errors import InputError

DEFAULT_REGION = "us-east-1"
_INDIRECT = ("sso_session", "sso_start_url", "credential_process", "role_arn", "web_identity")


@dataclasses.dataclass(frozen=True, slots=True, repr=False)
class S3Settings:
    """Where and as whom to reach S3; `repr` names where the credentials came from, not them."""

    endpoint: str | None
    region: str
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None
    source: str = ""
    """Where the credentials came from ("environment", "profile NAME in FILE"), for messages."""

    def __repr__(self) -> str:
        return (
            f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r}, "
            f"credentials from {self.source or 'the caller'})"
        )


def resolve_s3_settings(environ: Mapping[str, str]) -> S3Settings:
    """Reads the S3 settings from `environ` and the AWS files it points to.

    Raises:
        InputError: no credentials anywhere, half of a key pair, a named profile
            that no file has, or a file that does not parse.
    """
    home = environ.get("HOME") or os.path.expanduser("~")
    profile_name = environ.get("AWS_PROFILE") or "default"
    config_file = environ.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    creds_file = environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(
        home, ".aws", "credentials"
    )
    config = _profile(
        config_file, "default" if profile_name == "default" else f"profile {profile_name}"
    )
    creds = _profile(creds_file, profile_name)
    if "AWS_PROFILE" in environ and config is None and creds is None:
        raise InputError(
            f"AWS_PROFILE names the profile {profile_name!r}, which neither {config_file} "
            f"nor {creds_file} has"
        )
    config = config or {}
    endpoint = (
        environ.get("AWS_ENDPOINT_URL_S3")
        or environ.get("AWS_ENDPOINT_URL")
        or config.get("endpoint_url")
        or None
    )
    region = (
        environ.get("AWS_REGION")
        or environ.get("AWS_DEFAULT_REGION")
        or config.get("region")
        or DEFAULT_REGION
    )
    key_id, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    if key_id or secret:
        if not (key_id and secret):
            missing = "AWS_SECRET_ACCESS_KEY" if key_id else "AWS_ACCESS_KEY_ID"
            raise InputError(f"{missing} is not set, but the other half of the key pair is")
        token = environ.get("AWS_SESSION_TOKEN") or None
        return S3Settings(endpoint, region, key_id, secret, token, "environment")
    for section, path in ((creds, creds_file), (config, config_file)):
        if section and section.get("aws_access_key_id") and section.get("aws_secret_access_key"):
            return S3Settings(
                endpoint,
                region,
                section["aws_access_key_id"],
                section["aws_secret_access_key"],
                section.get("aws_session_token") or None,
                f"profile {profile_name} in {path}",
            )
    indirect = [key for key in _INDIRECT if key in config or (creds and key in creds)]
    if indirect:
        raise InputError(
            f"the AWS profile {profile_name!r} gets its credentials through {indirect[0]}, "
            "which worksnap does not read; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(for example from `aws configure export-credentials`)"
        )
    raise InputError(
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
        f"with aws_access_key_id and aws_secret_access_key in {creds_file}"
    )


def _profile(path: str, section: str) -> dict[str, str] | None:
    """The keys of `section` in the INI file `path`, or None if either is missing."""
    parser = configparser.ConfigParser(interpolation=None, default_section="\0none")
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        # The message names the file and the kind of fault, never a line of it.
        raise InputError(f"cannot read the AWS file {path}: {type(exc).__name__}") from None
    if not parser.has_section(section):
        return None
    return {key: value.strip() for key, value in parser.items(section)}
