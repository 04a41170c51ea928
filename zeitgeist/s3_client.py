"""The S3 backend's connection: the boto3 client for one bucket under a mesh's prefix,
the object keys there, and every request run under the retry policy with the store's
errors told apart (transient or not) and reported as `BackendError`.

botocore's own retries are disabled; `zeitgeist.retry.RetryPolicy` retries transient
failures (5xx, throttling, timeouts, dropped connections) until its deadline, after
which `BackendError` names the operation, key, bucket and endpoint.

`s3.S3Backend` builds one of these and implements the log's operations over it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    SSLError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from dreamcycle.zeitgeist.backend import BackendError
from dreamcycle.zeitgeist.object_keys import InvalidKey
from dreamcycle.zeitgeist.retry import RequestCounter, RetryDeadlineExceeded, RetryPolicy

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

T = TypeVar("T")

#: S3's limit on the length of an object key, in UTF-8 bytes.
MAX_KEY_BYTES: Final = 1024

#: Error codes that S3 and compatible stores use for conditions that heal by themselves.
TRANSIENT_ERROR_CODES: Final = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        # 409s that AWS documents as "retry": a concurrent conditional write or bucket
        # operation was in flight; the retry then gets the real answer (e.g. 412).
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)
HTTP_NOT_MODIFIED: Final = 304
HTTP_MOVED_PERMANENTLY: Final = 301
HTTP_FORBIDDEN: Final = 403
HTTP_NOT_FOUND: Final = 404
HTTP_PRECONDITION_FAILED: Final = 412
#: A Range starting at byte 0 of an empty object cannot be satisfied.
HTTP_RANGE_NOT_SATISFIABLE: Final = 416
HTTP_TOO_MANY_REQUESTS: Final = 429
HTTP_SERVER_ERROR: Final = 500
NO_SUCH_BUCKET: Final = "NoSuchBucket"


class S3ConfigError(ValueError):
    """The S3 backend was configured with values that cannot work."""


def error_status(error: Any) -> int:
    """The HTTP status of a botocore ClientError (0 if it carries none)."""
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def error_code(error: Any) -> str:
    """The S3 error code of a botocore ClientError, e.g. 'NoSuchKey' or '412'."""
    return str(error.response.get("Error", {}).get("Code", ""))


def is_transient(error: BaseException) -> bool:
    """Whether retrying the same request may succeed: outages, throttling, timeouts."""
    if isinstance(error, SSLError):
        return False  # a certificate problem does not heal by waiting
    if isinstance(error, BotoConnectionError | HTTPClientError | IncompleteReadError):
        return True
    if isinstance(error, ClientError):
        status = error_status(error)
        return (
            status >= HTTP_SERVER_ERROR
            or status == HTTP_TOO_MANY_REQUESTS
            or error_code(error) in TRANSIENT_ERROR_CODES
        )
    return False


class S3Connection:
    """A mesh's prefix in one bucket, reached through one boto3 client; the settings are
    `s3.S3Backend`'s, which says what each selects."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None,
        region: str,
        access_key_id: str | None,
        secret_access_key: str | None,
        session_token: str | None,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_pool_connections: int,
        retry: RetryPolicy | None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise S3ConfigError(f"S3 bucket name must be non-empty without '/', got {bucket!r}")
        if (access_key_id is None) != (secret_access_key is None):
            raise S3ConfigError(
                "S3 static credentials need both access_key_id and secret_access_key "
                "(or neither, to use boto3's standard credential chain)"
            )
        if not connect_timeout_s > 0 or not read_timeout_s > 0:
            raise S3ConfigError(
                f"S3 timeouts must be > 0 s, got connect_timeout_s={connect_timeout_s!r}, "
                f"read_timeout_s={read_timeout_s!r}"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None
        self.region = region
        self.requests = RequestCounter()
        self._retry = retry if retry is not None else RetryPolicy()
        self._key_root = f"{self.prefix}/" if self.prefix else ""
        config = Config(
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            # One attempt per call: retries belong to RetryPolicy, which owns the deadline.
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path"} if self.endpoint_url else {},
            max_pool_connections=max_pool_connections,
            # Checksums only where S3 demands them (DeleteObjects): several S3-compatible
            # stores reject the CRC headers that boto3 adds to every put by default.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        # A Session of our own: boto3's default one is shared and not thread-safe.
        self.client: S3Client = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            aws_session_token=session_token,
            region_name=region,
        ).client("s3", endpoint_url=self.endpoint_url, config=config)
        self.client.meta.events.register("before-send.s3", self._count_request)

    @property
    def location(self) -> str:
        """Where this connection writes, for error messages."""
        endpoint = self.endpoint_url or f"AWS S3 ({self.region})"
        return f"s3://{self.bucket}/{self._key_root} at {endpoint}"

    def object_key(self, key: str, *, allow_empty: bool = False) -> str:
        """The object key of the mesh's `key`, under the prefix."""
        if not key and not allow_empty:
            raise InvalidKey(f"empty key for {self.location}")
        if key.startswith("/"):
            raise InvalidKey(f"key {key!r} must be relative to the mesh prefix (no leading '/')")
        object_key = self._key_root + key
        if len(object_key.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidKey(f"object key {object_key!r} is longer than {MAX_KEY_BYTES} bytes")
        return object_key

    def mesh_key(self, object_key: str) -> str:
        """The mesh's key of an object key listed under the prefix."""
        return object_key[len(self._key_root) :]

    def check_bucket(self) -> None:
        """Fail clearly if the bucket is missing, elsewhere, or closed to these credentials.

        A one-key listing under the mesh prefix rather than HeadBucket: HeadBucket needs
        s3:ListBucket on the whole bucket, which a policy scoped to the prefix (docs/s3.md)
        rightly does not grant, and its error responses carry no error code.
        """

        def attempt() -> None:
            try:
                self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._key_root, MaxKeys=1)
            except ClientError as error:
                status = error_status(error)
                if status == HTTP_NOT_FOUND:
                    raise BackendError(
                        f"bucket {self.bucket!r} does not exist at "
                        f"{self.endpoint_url or 'AWS S3'}; create it first (docs/s3.md)"
                    ) from error
                if status == HTTP_FORBIDDEN:
                    raise BackendError(
                        f"access to bucket {self.bucket!r} at {self.endpoint_url or 'AWS S3'} "
                        "was denied: check the credentials and the IAM policy in docs/s3.md"
                    ) from error
                if status == HTTP_MOVED_PERMANENTLY:
                    raise BackendError(
                        f"bucket {self.bucket!r} is not in region {self.region!r}: "
                        "set the bucket's region in the configuration"
                    ) from error
                raise

        self.run("ListObjectsV2", self._key_root, attempt)

    def run(self, operation: str, object_key: str, call: Callable[[], T]) -> T:
        """Run one request under the retry policy; failures become BackendError in context."""
        try:
            return self._retry.call(call, is_transient)
        except RetryDeadlineExceeded as error:
            raise BackendError(
                f"s3 {operation} of {object_key!r} in {self.location}: {error}"
            ) from error
        except ClientError as error:
            raise BackendError(
                f"s3 {operation} of {object_key!r} in {self.location} failed: "
                f"{error_code(error)} (HTTP {error_status(error)}): "
                f"{error.response.get('Error', {}).get('Message', '')}"
            ) from error
        except BotoCoreError as error:
            raise BackendError(
                f"s3 {operation} of {object_key!r} in {self.location} failed: {error}"
            ) from error

    def close(self) -> None:
        self.client.close()

    def _count_request(self, event_name: str, **_: Any) -> None:
        self.requests.record(event_name.rsplit(".", 1)[-1])
