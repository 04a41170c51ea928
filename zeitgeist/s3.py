"""The zeitgeist on S3 and S3-compatible stores (AWS, MinIO, SeaweedFS).

Over 400 lines as one module: one module per backend, each store quirk beside its request.

Correctness rests on conditional writes: a log segment is created with
``PutObject(IfNoneMatch='*')`` and never overwritten; heartbeats and the compaction
lease are swapped with ``IfMatch=<etag>``. `probe()` refuses a store that ignores
these headers, since it would silently let one writer overwrite another's entries.

botocore's own retries are disabled; `zeitgeist.retry.RetryPolicy` retries transient
failures (5xx, throttling, timeouts, dropped connections) until its deadline, after
which `BackendError` names the operation, key, bucket and endpoint.

Store quirks measured and handled here:
- ``IfMatch`` on a missing key answers 412 on SeaweedFS and 404 on AWS / moto.
- MinIO before April 2024 answered 304 instead of 412 to failed conditional puts.
- SeaweedFS keeps keys as filer paths: a listing that spans sub-folders is not in
  byte order, so `list_after` sorts and filters the keys it receives.
"""

from __future__ import annotations

import functools
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

from dreamcycle.zeitgeist.backend import (
    MAX_OBJECT_BYTES,
    BackendError,
    KeyExists,
    ObjectTooLarge,
    Versioned,
    check_create_only,
    check_read_bound,
    precondition_failed,
    written_by_earlier_attempt,
)
from dreamcycle.zeitgeist.defaults import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_S3_REGION
from dreamcycle.zeitgeist.object_keys import InvalidKey
from dreamcycle.zeitgeist.retry import RequestCounter, RetryDeadlineExceeded, RetryPolicy

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import (
        DeleteObjectsOutputTypeDef,
        ListObjectsV2OutputTypeDef,
        ListObjectsV2RequestTypeDef,
    )

T = TypeVar("T")

BACKEND_NAME: Final = "s3"
DEFAULT_REGION: Final = DEFAULT_S3_REGION
#: Seconds to wait for response bytes, far beyond what a small put takes on a local store
#: (scripts/bench_zeitgeist.py times puts).
DEFAULT_READ_TIMEOUT_S: Final = 15.0
#: Concurrent HTTP connections per backend; the daemon's thread limiter stays below it.
DEFAULT_MAX_POOL_CONNECTIONS: Final = 16
#: Keys per ListObjectsV2 page (S3's maximum); an idle poll fits in one page.
DEFAULT_LIST_PAGE_SIZE: Final = 1000
#: S3's limit on keys per DeleteObjects request.
DELETE_BATCH_SIZE: Final = 1000
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
#: Statuses with which a conditional put says "the condition did not hold".
CONDITION_FAILED_STATUSES: Final = frozenset({HTTP_PRECONDITION_FAILED, HTTP_NOT_MODIFIED})
NO_SUCH_BUCKET: Final = "NoSuchBucket"


def _total_size(content_range: str | None) -> int | None:
    """The object's full size from a Content-Range such as 'bytes 0-1024/5000000'."""
    _, slash, total = (content_range or "").rpartition("/")
    return int(total) if slash and total.isdigit() else None


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


class S3Backend:
    """A mesh's zeitgeist under `prefix` in one bucket.

    Credentials: pass `access_key_id` / `secret_access_key` (and `session_token`), or
    leave them out to use boto3's standard chain (environment, shared config and
    credentials files, instance / container roles). `endpoint_url` selects an
    S3-compatible store (MinIO, SeaweedFS) and switches to path-style addressing.
    """

    name: str = BACKEND_NAME

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None = None,
        region: str = DEFAULT_REGION,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        max_pool_connections: int = DEFAULT_MAX_POOL_CONNECTIONS,
        list_page_size: int = DEFAULT_LIST_PAGE_SIZE,
        retry: RetryPolicy | None = None,
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
        if not 1 <= list_page_size <= DEFAULT_LIST_PAGE_SIZE:
            raise S3ConfigError(
                f"list_page_size must be within 1..{DEFAULT_LIST_PAGE_SIZE}, got {list_page_size!r}"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None
        self.list_page_size = list_page_size
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
        self._client: S3Client = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            aws_session_token=session_token,
            region_name=region,
        ).client("s3", endpoint_url=self.endpoint_url, config=config)
        self._client.meta.events.register("before-send.s3", self._count_request)

    @property
    def client(self) -> S3Client:
        """The underlying boto3 S3 client (for tests and diagnostics)."""
        return self._client

    @property
    def location(self) -> str:
        """Where this backend writes, for error messages."""
        endpoint = self.endpoint_url or f"AWS S3 ({self.region})"
        return f"s3://{self.bucket}/{self._key_root} at {endpoint}"

    def probe(self) -> None:
        self._check_bucket()
        check_create_only(
            lambda key, data: self._conditional_put(key, data, if_match=None) is not None,
            self.delete,
            self.location,
            "does not honour If-None-Match conditional writes",
        )

    def create(self, key: str, data: bytes) -> None:
        if self._conditional_put(key, data, if_match=None) is None:
            raise KeyExists(f"{key!r} already exists in {self.location}")

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        current = self.read_versioned(key, max_bytes=max_bytes)
        if current is None:
            raise KeyError(key)
        return current.data

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        object_prefix = self._object_key(prefix, allow_empty=True)
        request: ListObjectsV2RequestTypeDef = {
            "Bucket": self.bucket,
            "Prefix": object_prefix,
            "MaxKeys": self.list_page_size,
        }
        if start_after:
            request["StartAfter"] = self._object_key(start_after)
        found: list[str] = []
        while True:
            page = self._list_page(request)
            found.extend(item["Key"] for item in page.get("Contents", []) if "Key" in item)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
            request["ContinuationToken"] = token
        keys = (object_key[len(self._key_root) :] for object_key in found)
        return sorted({key for key in keys if key > start_after and key.startswith(prefix)})

    def delete(self, keys: list[str]) -> None:
        object_keys = [self._object_key(key) for key in keys]
        for start in range(0, len(object_keys), DELETE_BATCH_SIZE):
            response = self._delete_batch(object_keys[start : start + DELETE_BATCH_SIZE])
            failures = [
                failure
                for failure in response.get("Errors", [])
                if failure.get("Code") != "NoSuchKey"
            ]
            if failures:
                described = ", ".join(
                    f"{failure.get('Key')!r}: {failure.get('Code')} {failure.get('Message', '')}"
                    for failure in failures[:5]
                )
                raise BackendError(
                    f"s3 DeleteObjects in {self.location} failed for {len(failures)} key(s): "
                    f"{described}"
                )

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        """A ranged GET of the first `max_bytes + 1` bytes, so a larger object costs one
        byte more than the bound, not its size; its size comes from Content-Range. The
        body is read with the same bound, in case a store ignores the Range."""
        check_read_bound(max_bytes)
        object_key = self._object_key(key)
        wanted = f"bytes=0-{max_bytes}"

        def attempt() -> Versioned | None:
            try:
                try:
                    response = self._client.get_object(
                        Bucket=self.bucket, Key=object_key, Range=wanted
                    )
                except ClientError as error:
                    if error_status(error) != HTTP_RANGE_NOT_SATISFIABLE:
                        raise
                    # An empty object: no byte 0 to start the range at.
                    response = self._client.get_object(Bucket=self.bucket, Key=object_key)
            except ClientError as error:
                if error_status(error) == HTTP_NOT_FOUND and error_code(error) != NO_SUCH_BUCKET:
                    return None
                raise
            body = response["Body"]
            try:
                # Read inside the attempt so a connection dropped mid-body is retried. Asked
                # for the length the store announced (plus one), not the bound: a read
                # allocates what it asks for.
                length = response.get("ContentLength")
                wanted_bytes = max_bytes if not isinstance(length, int) else min(length, max_bytes)
                data = body.read(wanted_bytes + 1)
                if wanted_bytes < len(data) <= max_bytes:
                    data += body.read(max_bytes + 1 - len(data))  # longer than announced
            finally:
                body.close()
            if len(data) > max_bytes:
                raise ObjectTooLarge(
                    key,
                    max_bytes,
                    received=len(data),
                    size=_total_size(response.get("ContentRange")),
                    where=self.location,
                )
            return Versioned(data=data, etag=str(response["ETag"]))

        return self._run("GetObject", object_key, attempt)

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        etag = self._conditional_put(key, data, if_match=expect)
        if etag is None:
            raise precondition_failed(key, self.location, expect)
        return etag

    def write_overwrite(self, key: str, data: bytes) -> None:
        object_key = self._object_key(key)
        self._run(
            "PutObject",
            object_key,
            functools.partial(
                self._client.put_object, Bucket=self.bucket, Key=object_key, Body=data
            ),
        )

    def close(self) -> None:
        self._client.close()

    def _conditional_put(self, key: str, data: bytes, *, if_match: str | None) -> str | None:
        """Put `data` if the object has ETag `if_match` (None: if there is no object).

        Returns the new ETag, or None if the condition did not hold.

        After a retry, a failed condition is checked against the stored bytes: the put may
        have met the effect of its own earlier attempt, whose response was lost.
        """
        object_key = self._object_key(key)
        # AWS and moto answer an If-Match on a missing key with 404 rather than 412.
        missing_means_failed = if_match is not None
        attempts = 0

        def attempt() -> str | None:
            nonlocal attempts
            attempts += 1
            try:
                if if_match is None:
                    response = self._client.put_object(
                        Bucket=self.bucket, Key=object_key, Body=data, IfNoneMatch="*"
                    )
                else:
                    response = self._client.put_object(
                        Bucket=self.bucket, Key=object_key, Body=data, IfMatch=if_match
                    )
            except ClientError as error:
                status = error_status(error)
                if status in CONDITION_FAILED_STATUSES or (
                    missing_means_failed
                    and status == HTTP_NOT_FOUND
                    and error_code(error) != NO_SUCH_BUCKET
                ):
                    return None
                raise
            return str(response["ETag"])

        etag = self._run("PutObject", object_key, attempt)
        if etag is None and attempts > 1:
            return written_by_earlier_attempt(self, key, data)
        return etag

    def _list_page(self, request: ListObjectsV2RequestTypeDef) -> ListObjectsV2OutputTypeDef:
        return self._run(
            "ListObjectsV2",
            request.get("Prefix", ""),
            lambda: self._client.list_objects_v2(**request),
        )

    def _delete_batch(self, object_keys: list[str]) -> DeleteObjectsOutputTypeDef:
        return self._run(
            "DeleteObjects",
            object_keys[0],
            lambda: self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in object_keys], "Quiet": True},
            ),
        )

    def _check_bucket(self) -> None:
        """Fail clearly if the bucket is missing, elsewhere, or closed to these credentials.

        A one-key listing under the mesh prefix rather than HeadBucket: HeadBucket needs
        s3:ListBucket on the whole bucket, which a policy scoped to the prefix (docs/s3.md)
        rightly does not grant, and its error responses carry no error code.
        """

        def attempt() -> None:
            try:
                self._client.list_objects_v2(Bucket=self.bucket, Prefix=self._key_root, MaxKeys=1)
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

        self._run("ListObjectsV2", self._key_root, attempt)

    def _run(self, operation: str, object_key: str, call: Callable[[], T]) -> T:
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

    def _object_key(self, key: str, *, allow_empty: bool = False) -> str:
        if not key and not allow_empty:
            raise InvalidKey(f"empty key for {self.location}")
        if key.startswith("/"):
            raise InvalidKey(f"key {key!r} must be relative to the mesh prefix (no leading '/')")
        object_key = self._key_root + key
        if len(object_key.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidKey(f"object key {object_key!r} is longer than {MAX_KEY_BYTES} bytes")
        return object_key

    def _count_request(self, event_name: str, **_: Any) -> None:
        self.requests.record(event_name.rsplit(".", 1)[-1])
