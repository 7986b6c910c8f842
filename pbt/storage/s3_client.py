"""What the S3 workspace needs from boto3: parsing ``s3://bucket/prefix``, one configured client, and
turning boto3's errors into the workspace's (:class:`~pbt.errors.WorkspaceError` chained to an
``OSError``, so ``pbt.on_write_error=retry`` treats an unreachable server like a full disk).

Credentials, region and endpoint come from the standard AWS variables and files
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``,
``AWS_PROFILE``, ...), as for the AWS CLI. boto3 is imported only when an ``s3://`` workspace is
opened (``pip install 'pbt-rl[s3]'``).
"""

import errno
import logging
import os
import re
from typing import Any, Optional, Tuple

from pbt.errors import ConfigError, WorkspaceError
from pbt.storage.backend import NotFound

SCHEME = "s3://"
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a connection: an unreachable server fails fast and the member trains on."""
READ_TIMEOUT = 120.0
MAX_ATTEMPTS = 3
"""boto3's own retries of one request (standard mode, with backoff) before the workspace sees an error."""


def is_s3_url(root: Any) -> bool:
    """True for a ``pbt.workspace`` that names an S3 location."""
    return isinstance(root, str) and root.startswith(SCHEME)


def parse_s3_url(url: str) -> Tuple[str, str]:
    """``s3://bucket/some/prefix/`` -> ("bucket", "some/prefix"); ConfigError saying how to fix it."""
    if not is_s3_url(url):
        raise ConfigError(f"pbt.workspace={url!r} is not an s3:// URL")
    bucket, _, prefix = url[len(SCHEME) :].partition("/")
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(
            f"pbt.workspace={url!r}: {bucket!r} is not a valid bucket name (3 to 63 lowercase letters, digits, "
            "dots and hyphens, starting and ending with a letter or digit). Write it as s3://<bucket>/<prefix>."
        )
    prefix = prefix.strip("/")
    parts = prefix.split("/") if prefix else []
    if any(part in ("", ".", "..") for part in parts):
        raise ConfigError(
            f"pbt.workspace={url!r}: the prefix {prefix!r} has an empty, '.' or '..' component; "
            "write it as s3://<bucket>/<dir>/<dir>"
        )
    return bucket, prefix


def endpoint_url() -> Optional[str]:
    """The endpoint set by the standard variables (None: AWS itself)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def make_client() -> Any:
    """A boto3 S3 client configured from the environment, with short connect timeouts and retries."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise ConfigError(
            "pbt.workspace=s3://... needs boto3: pip install 'pbt-rl[s3]' (or pip install boto3)"
        ) from exc
    endpoint = endpoint_url()
    config = Config(
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        max_pool_connections=32,
        retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        # self-hosted stores (SeaweedFS, MinIO, Ceph) serve buckets as paths
        s3={"addressing_style": "path"} if endpoint else None,
    )
    logging.getLogger("botocore.credentials").setLevel(logging.WARNING)  # "Found credentials" at every start
    session = boto3.session.Session()
    region = session.region_name or "us-east-1"
    return session.client("s3", endpoint_url=endpoint, region_name=region, config=config)


def error_code(exc: BaseException) -> str:
    """The S3 error code of a botocore ClientError ('' for any other error)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    code = response.get("Error", {}).get("Code", "")
    return str(code or response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def is_not_found(exc: BaseException) -> bool:
    return error_code(exc) in ("NoSuchKey", "404", "NotFound")


def is_precondition_failed(exc: BaseException) -> bool:
    """A conditional write lost: the object exists (412) or a concurrent one is in flight (409)."""
    return error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def translate(exc: BaseException, what: str, where: str, bucket: str) -> WorkspaceError:
    """The workspace error for a failed request: NotFound for a missing object, otherwise a
    WorkspaceError chained to an OSError saying why (unreachable, permission, missing bucket)."""
    code = error_code(exc)
    if is_not_found(exc):
        return NotFound(f"{where}: no such object")
    endpoint = endpoint_url() or "AWS S3"
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        cause: OSError = PermissionError(
            errno.EACCES,
            f"{code}: the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE) give no "
            f"access to bucket {bucket!r} at {endpoint}, or it does not exist (some servers say so for a missing "
            f"bucket): check the bucket policy, or create it (aws s3 mb s3://{bucket})",
        )
    elif code == "NoSuchBucket":
        cause = FileNotFoundError(
            errno.ENOENT,
            f"bucket {bucket!r} does not exist at {endpoint}: create it (aws s3 mb s3://{bucket}) or fix pbt.workspace",
        )
    elif code:
        cause = OSError(errno.EIO, f"the object store answered {code}")
    else:  # no answer at all: connection refused, reset, timed out
        cause = ConnectionError(
            errno.ECONNREFUSED,
            f"cannot reach the object store at {endpoint} ({exc}); check "
            "AWS_ENDPOINT_URL and that the server is running",
        )
    cause.__cause__ = exc
    error = WorkspaceError(f"{what} {where} failed: {cause.strerror}")
    error.__cause__ = cause
    return error
