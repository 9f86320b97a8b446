"""A ChunkStorage on an S3 bucket through aiobotocore (design §5.2, the plain S3 binding).

* One object per chunk, key = ``prefix + name``. Objects cannot be appended to
  (``supports_append = False``): ``create`` and ``write`` raise NotSupported and SLTS writes every
  piece as a new chunk with ``create_with_content`` (one PutObject).
* ``create_with_content`` must not replace an existing object. It sends ``If-None-Match: *`` (a
  conditional write, which S3 and moto support); a server answering 501 NotImplemented switches
  this instance to a HeadObject before each PutObject (``conditional_put=False`` starts there). That
  fallback has a race (two creators of one name both pass the HeadObject and the last wins), which
  is harmless here: SLTS writes a chunk from one place and chunk names are unique per owner epoch.
* ``read`` is a ranged GetObject; ``list`` a paginated ListObjectsV2; ``delete`` a HeadObject (so
  that a missing chunk is reported) then DeleteObject.
* ``set_read_only`` records the flag as the object tag ``tributary-read-only`` = ``true``/``false``
  (replacing the object's tag set); ``get_info`` reads it with GetObjectTagging alongside
  HeadObject. Nothing in S3 enforces it: this class refuses to concat into a read-only chunk, and
  delete is allowed (as on every store).
* ``concat`` rewrites the target with a multipart upload: UploadPartCopy of the target itself and
  of each source's byte range, server side. S3 wants every part but the last to be at least
  ``min_part_size`` (5 MiB), so ranges too small to be parts on their own are downloaded and
  uploaded together as one part (topped up from the next range when needed), at most
  ``PARTS_IN_FLIGHT`` parts at a time. ``bytes_concatenated`` counts the source bytes appended,
  however they moved. A concat that fails aborts its upload and leaves the target as it was.
* The client is created on first use (credentials from botocore's default chain: environment,
  config files, instance roles) and closed by ``close()``. Connection errors, timeouts, 5xx and
  throttling raise ChunkStorageUnavailable (after botocore's own retries, set through ``config``);
  other refusals (AccessDenied, NoSuchBucket, KeyTooLongError, ...) a plain ChunkStorageError.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiobotocore.session import get_session
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from .chunk_storage import (
    ChunkAlreadyExists,
    ChunkInfo,
    ChunkNotFound,
    ChunkReadOnly,
    ChunkStorage,
    ChunkStorageError,
    ChunkStorageUnavailable,
    NotSupported,
    WriteData,
    as_parts,
)

MIN_PART_BYTES = 5 << 20
MAX_COPY_PART_BYTES = 5 << 30
PARTS_IN_FLIGHT = 4  # bounds the memory of re-uploaded parts to about 4 * min_part_size
READ_ONLY_TAG = "tributary-read-only"
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
_ALREADY_EXISTS = {"412", "PreconditionFailed"}
_TRANSIENT = {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestLimitExceeded",
              "RequestTimeout", "InternalError", "ServiceUnavailable", "ConditionalRequestConflict",
              "OperationAborted"}


class S3ChunkStorage(ChunkStorage):
    supports_append = False
    supports_concat = True

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None, region: str | None = None,
                 *, conditional_put: bool = True, min_part_size: int = MIN_PART_BYTES, **client_options):
        """``client_options`` go to aiobotocore's ``create_client`` (e.g. ``config=AioConfig(...)``)."""
        super().__init__()
        self.bucket, self.prefix = bucket, prefix
        self.conditional_put = conditional_put
        self.min_part_size = min_part_size
        self._client_options = dict(client_options, endpoint_url=endpoint_url, region_name=region)
        self._client: Any = None  # the aiobotocore S3 client (untyped), once made
        self._exit_stack: contextlib.AsyncExitStack | None = None
        self._client_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<S3ChunkStorage s3://{self.bucket}/{self.prefix}>"

    async def _s3(self):
        if self._client is not None:
            return self._client
        async with self._client_lock:
            if self._client is None:
                stack = contextlib.AsyncExitStack()
                self._client = await stack.enter_async_context(
                    get_session().create_client("s3", **self._client_options))
                self._exit_stack = stack
        return self._client

    def _key(self, name: str) -> str:
        return self.prefix + name

    async def _length(self, name: str) -> int:
        with _translated(name):
            response = await (await self._s3()).head_object(Bucket=self.bucket, Key=self._key(name))
        return response["ContentLength"]

    async def _read_only(self, name: str) -> bool:
        with _translated(name):
            response = await (await self._s3()).get_object_tagging(Bucket=self.bucket, Key=self._key(name))
        return {"Key": READ_ONLY_TAG, "Value": "true"} in response["TagSet"]

    async def exists(self, name: str) -> bool:
        try:
            await self._length(name)
        except ChunkNotFound:
            return False
        return True

    async def get_info(self, name: str) -> ChunkInfo:
        length, read_only = await asyncio.gather(self._length(name), self._read_only(name))
        return ChunkInfo(name, length, read_only)

    async def create(self, name: str) -> None:
        raise NotSupported(name, "S3 objects cannot be appended to: use create_with_content")

    async def write(self, name: str, offset: int, data: WriteData) -> int:
        raise NotSupported(name, "S3 objects cannot be appended to")

    async def create_with_content(self, name: str, data: WriteData) -> int:
        body = data if isinstance(data, bytes) else b"".join(as_parts(data))
        s3 = await self._s3()
        if self.conditional_put:
            try:
                with _translated(name):
                    await s3.put_object(Bucket=self.bucket, Key=self._key(name), Body=body, IfNoneMatch="*")
            except ChunkStorageError as error:
                if _code(error.__cause__) != "NotImplemented":
                    raise
                self.conditional_put = False
        if not self.conditional_put:
            if await self.exists(name):
                raise ChunkAlreadyExists(name)
            with _translated(name):
                await s3.put_object(Bucket=self.bucket, Key=self._key(name), Body=body)
        self.counters.chunks_created += 1
        self.counters.bytes_written += len(body)
        self.counters.writes += 1
        return len(body)

    async def delete(self, name: str) -> None:
        await self._length(name)
        with _translated(name):
            await (await self._s3()).delete_object(Bucket=self.bucket, Key=self._key(name))
        self.counters.chunks_deleted += 1

    async def read(self, name: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"{name}: read of {length} at {offset}")
        data = b""
        if length == 0:
            self._check_read(name, offset, length, await self._length(name))
        else:
            try:
                data = await self._get_range(name, offset, offset + length)
            except ChunkStorageError as error:
                if _code(error.__cause__) != "InvalidRange":  # at or beyond the end, or an empty object
                    raise
                self._check_read(name, offset, length, await self._length(name))
        self.counters.bytes_read += len(data)
        self.counters.reads += 1
        return data

    @staticmethod
    def _check_read(name: str, offset: int, length: int, chunk_length: int) -> None:
        if offset > chunk_length:
            raise ValueError(f"{name}: read of {length} at {offset}, chunk length {chunk_length}")

    async def _get_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the chunk (fewer if it is shorter)."""
        with _translated(name):
            response = await (await self._s3()).get_object(
                Bucket=self.bucket, Key=self._key(name), Range=f"bytes={start}-{end - 1}")
            async with response["Body"] as body:
                return await body.read()

    async def concat(self, target: str, sources: Sequence[tuple[str, int]]) -> int:
        info = await self.get_info(target)
        if info.read_only:
            raise ChunkReadOnly(target)
        lengths = await asyncio.gather(*(self._length(source) for source, _ in sources))
        for (source, length), source_length in zip(sources, lengths, strict=True):
            if not 0 <= length <= source_length:
                raise ValueError(f"{source}: concat of {length} bytes, chunk length {source_length}")
        added = sum(length for _, length in sources)
        if added:
            pieces = [(target, 0, info.length), *((source, 0, length) for source, length in sources)]
            await self._multipart_upload(target, plan_parts(pieces, self.min_part_size))
            self.counters.bytes_concatenated += added
        return info.length + added

    async def _multipart_upload(self, name: str, parts: list) -> None:
        s3, key = await self._s3(), self._key(name)
        with _translated(name):
            upload_id = (await s3.create_multipart_upload(Bucket=self.bucket, Key=key))["UploadId"]
        in_flight = asyncio.Semaphore(PARTS_IN_FLIGHT)
        try:
            etags = await asyncio.gather(*(self._upload_part(name, upload_id, number, part, in_flight)
                                           for number, part in enumerate(parts, start=1)))
            with _translated(name):
                await s3.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id,
                    MultipartUpload={"Parts": [{"PartNumber": number, "ETag": etag}
                                               for number, etag in enumerate(etags, start=1)]})
        except BaseException:
            with contextlib.suppress(Exception):
                await s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    async def _upload_part(self, name: str, upload_id: str, number: int, part, in_flight: asyncio.Semaphore) -> str:
        """One part: a server-side copy of ``(source, start, end)``, or a list of ranges to upload."""
        s3 = await self._s3()
        common = {"Bucket": self.bucket, "Key": self._key(name), "UploadId": upload_id, "PartNumber": number}
        async with in_flight:
            if isinstance(part, tuple):
                source, start, end = part
                with _translated(source):
                    response = await s3.upload_part_copy(
                        **common, CopySource={"Bucket": self.bucket, "Key": self._key(source)},
                        CopySourceRange=f"bytes={start}-{end - 1}")
                return response["CopyPartResult"]["ETag"]
            body = b"".join([await self._get_range(source, start, end) for source, start, end in part])
            with _translated(name):
                return (await s3.upload_part(**common, Body=body))["ETag"]

    async def set_read_only(self, name: str, read_only: bool = True) -> None:
        tags = [{"Key": READ_ONLY_TAG, "Value": "true" if read_only else "false"}]
        with _translated(name):
            await (await self._s3()).put_object_tagging(Bucket=self.bucket, Key=self._key(name),
                                                        Tagging={"TagSet": tags})

    async def list(self, prefix: str = "") -> list[str]:
        names: list[str] = []
        with _translated(prefix):
            paginator = (await self._s3()).get_paginator("list_objects_v2")
            async for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
                names.extend(item["Key"][len(self.prefix):] for item in page.get("Contents", ()))
        return sorted(names)

    async def close(self) -> None:
        if self._exit_stack is not None:
            stack, self._exit_stack, self._client = self._exit_stack, None, None
            await stack.aclose()


def plan_parts(pieces: Sequence[tuple[str, int, int]], min_part_size: int) -> list:
    """Groups byte ranges ``(chunk, start, end)``, in order, into multipart-upload parts.

    A part is either one range to copy server side, ``(chunk, start, end)``, at least
    ``min_part_size`` and at most 5 GiB long, or a list of ranges to download and upload as one
    part. Every part but the last is at least ``min_part_size`` long.
    """
    parts: list = []
    buffered: list[tuple[str, int, int]] = []
    buffered_bytes = 0
    for chunk, start, end in pieces:
        while start < end:
            if not buffered and end - start >= min_part_size:
                stop = min(end, start + MAX_COPY_PART_BYTES)
                parts.append((chunk, start, stop))
            else:
                stop = min(end, start + min_part_size - buffered_bytes)
                buffered.append((chunk, start, stop))
                buffered_bytes += stop - start
                if buffered_bytes >= min_part_size:
                    parts.append(buffered)
                    buffered, buffered_bytes = [], 0
            start = stop
    if buffered:
        parts.append(buffered)
    return parts


def _code(error: BaseException | None) -> str:
    return error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else ""


@contextlib.contextmanager
def _translated(name: str):
    """Turns botocore and aiohttp failures into ChunkStorage errors (the original as ``__cause__``)."""
    try:
        yield
    except ClientError as error:
        code = _code(error)
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in _NOT_FOUND:
            raise ChunkNotFound(name) from error
        if code in _ALREADY_EXISTS:
            raise ChunkAlreadyExists(name) from error
        if status >= 500 or status == 429 or code in _TRANSIENT:
            raise ChunkStorageUnavailable(name, f"S3 {code} ({status})") from error
        raise ChunkStorageError(name, f"S3 {code} ({status}): {error}") from error
    except (TimeoutError, HTTPClientError, BotoConnectionError, aiohttp.ClientError) as error:
        raise ChunkStorageUnavailable(name, f"{type(error).__name__}: {error}") from error
