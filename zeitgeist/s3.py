"""The zeitgeist on S3 and S3-compatible stores (AWS, MinIO, SeaweedFS): `S3Backend`,
the log's operations as S3 requests. Its connection (the client, object keys, retries
and error mapping) is `s3_client`'s.

Correctness rests on conditional writes: a log segment is created with
``PutObject(IfNoneMatch='*')`` and never overwritten; heartbeats and the compaction
lease are swapped with ``IfMatch=<etag>``. `probe()` refuses a store that ignores
these headers, since it would silently let one writer overwrite another's entries.

Store quirks measured and handled here:
- ``IfMatch`` on a missing key answers 412 on SeaweedFS and 404 on AWS / moto.
- MinIO before April 2024 answered 304 instead of 412 to failed conditional puts.
- SeaweedFS keeps keys as filer paths: a listing that spans sub-folders is not in
  byte order, so `list_after` sorts and filters the keys it receives.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

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
from dreamcycle.zeitgeist.retry import RetryPolicy
from dreamcycle.zeitgeist.s3_client import (
    HTTP_NOT_FOUND,
    HTTP_NOT_MODIFIED,
    HTTP_PRECONDITION_FAILED,
    HTTP_RANGE_NOT_SATISFIABLE,
    NO_SUCH_BUCKET,
    S3ConfigError,
    S3Connection,
    error_code,
    error_status,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import (
        DeleteObjectsOutputTypeDef,
        ListObjectsV2OutputTypeDef,
        ListObjectsV2RequestTypeDef,
    )

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
#: Statuses with which a conditional put says "the condition did not hold".
CONDITION_FAILED_STATUSES: Final = frozenset({HTTP_PRECONDITION_FAILED, HTTP_NOT_MODIFIED})


def _total_size(content_range: str | None) -> int | None:
    """The object's full size from a Content-Range such as 'bytes 0-1024/5000000'."""
    _, slash, total = (content_range or "").rpartition("/")
    return int(total) if slash and total.isdigit() else None


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
        self._s3 = S3Connection(
            bucket,
            prefix,
            endpoint_url=endpoint_url,
            region=region,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            session_token=session_token,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            max_pool_connections=max_pool_connections,
            retry=retry,
        )
        if not 1 <= list_page_size <= DEFAULT_LIST_PAGE_SIZE:
            raise S3ConfigError(
                f"list_page_size must be within 1..{DEFAULT_LIST_PAGE_SIZE}, got {list_page_size!r}"
            )
        self.bucket = self._s3.bucket
        self.prefix = self._s3.prefix
        self.endpoint_url = self._s3.endpoint_url
        self.list_page_size = list_page_size
        self.region = region
        self.requests = self._s3.requests

    @property
    def client(self) -> S3Client:
        """The underlying boto3 S3 client (for tests and diagnostics)."""
        return self._s3.client

    @property
    def location(self) -> str:
        """Where this backend writes, for error messages."""
        return self._s3.location

    def probe(self) -> None:
        self._s3.check_bucket()
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
        object_prefix = self._s3.object_key(prefix, allow_empty=True)
        request: ListObjectsV2RequestTypeDef = {
            "Bucket": self.bucket,
            "Prefix": object_prefix,
            "MaxKeys": self.list_page_size,
        }
        if start_after:
            request["StartAfter"] = self._s3.object_key(start_after)
        found: list[str] = []
        while True:
            page = self._list_page(request)
            found.extend(item["Key"] for item in page.get("Contents", []) if "Key" in item)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
            request["ContinuationToken"] = token
        keys = (self._s3.mesh_key(object_key) for object_key in found)
        return sorted({key for key in keys if key > start_after and key.startswith(prefix)})

    def delete(self, keys: list[str]) -> None:
        object_keys = [self._s3.object_key(key) for key in keys]
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
        object_key = self._s3.object_key(key)
        wanted = f"bytes=0-{max_bytes}"

        def attempt() -> Versioned | None:
            try:
                try:
                    response = self._s3.client.get_object(
                        Bucket=self.bucket, Key=object_key, Range=wanted
                    )
                except ClientError as error:
                    if error_status(error) != HTTP_RANGE_NOT_SATISFIABLE:
                        raise
                    # An empty object: no byte 0 to start the range at.
                    response = self._s3.client.get_object(Bucket=self.bucket, Key=object_key)
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

        return self._s3.run("GetObject", object_key, attempt)

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        etag = self._conditional_put(key, data, if_match=expect)
        if etag is None:
            raise precondition_failed(key, self.location, expect)
        return etag

    def write_overwrite(self, key: str, data: bytes) -> None:
        object_key = self._s3.object_key(key)
        self._s3.run(
            "PutObject",
            object_key,
            functools.partial(
                self._s3.client.put_object, Bucket=self.bucket, Key=object_key, Body=data
            ),
        )

    def close(self) -> None:
        self._s3.close()

    def _conditional_put(self, key: str, data: bytes, *, if_match: str | None) -> str | None:
        """Put `data` if the object has ETag `if_match` (None: if there is no object).

        Returns the new ETag, or None if the condition did not hold.

        After a retry, a failed condition is checked against the stored bytes: the put may
        have met the effect of its own earlier attempt, whose response was lost.
        """
        object_key = self._s3.object_key(key)
        # AWS and moto answer an If-Match on a missing key with 404 rather than 412.
        missing_means_failed = if_match is not None
        attempts = 0

        def attempt() -> str | None:
            nonlocal attempts
            attempts += 1
            try:
                if if_match is None:
                    response = self._s3.client.put_object(
                        Bucket=self.bucket, Key=object_key, Body=data, IfNoneMatch="*"
                    )
                else:
                    response = self._s3.client.put_object(
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

        etag = self._s3.run("PutObject", object_key, attempt)
        if etag is None and attempts > 1:
            return written_by_earlier_attempt(self, key, data)
        return etag

    def _list_page(self, request: ListObjectsV2RequestTypeDef) -> ListObjectsV2OutputTypeDef:
        return self._s3.run(
            "ListObjectsV2",
            request.get("Prefix", ""),
            lambda: self._s3.client.list_objects_v2(**request),
        )

    def _delete_batch(self, object_keys: list[str]) -> DeleteObjectsOutputTypeDef:
        return self._s3.run(
            "DeleteObjects",
            object_keys[0],
            lambda: self._s3.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": key} for key in object_keys], "Quiet": True},
            ),
        )
