"""Failures of the lake's object store as one line: which lake, and why.

Each engine reports the same few causes its own way: `deltalake` (delta-rs) as an OSError holding a chain of
colour-coded causes that ends in the store's raw XML, boto3 as a botocore exception, Spark as a Java stack trace of
Hadoop S3A exceptions. `store_failure` reads any of them and says `the lake s3a://bucket/prefix: <cause>`, one of:
the bucket does not exist, no credentials found, the credentials are refused, the endpoint is unreachable; or,
for anything else the store answers, its error code and message without markup.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from audit.contract.errors import LakeError

if TYPE_CHECKING:
    from audit.io.lake import Lake
    from audit.settings import Settings

# What only an object-store failure says: the engines' S3 error types and phrases (never the lake's URI alone,
# which kafka-audit's own errors name too).
STORE_MARKERS = (
    "Generic S3 error",  # delta-rs (its object_store crate)
    "Error performing ",
    "lacked the necessary privileges",
    "lacked valid authentication credentials",
    "botocore.",  # boto3 (the type names `_texts` adds)
    "org.apache.hadoop.fs.s3a",  # Spark's S3A
    "software.amazon.awssdk",
)
NO_BUCKET = ("NoSuchBucket", "bucket does not exist", "UnknownStoreException")
# Before the refusals: delta-rs asks the instance metadata endpoint (169.254.169.254) when it has no key, and
# S3A's missing credentials are an AccessDeniedException.
NO_CREDENTIALS = (
    "NoCredentialsError",
    "Unable to locate credentials",
    "PartialCredentialsError",
    "NoAwsCredentialsException",
    "No AWS Credentials",
    "CredentialInitializationException",
    "169.254.169.254",
)
REFUSED = (
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "403 Forbidden",
    "ExpiredToken",
    "lacked the necessary privileges",
    "lacked valid authentication credentials",
)
UNREACHABLE = (
    "EndpointConnectionError",
    "Could not connect to the endpoint URL",
    "ConnectTimeoutError",
    "Connection refused",
    "tcp connect error",
    "java.net.ConnectException",
    "UnknownHostException",
    "dns error",
    "error sending request",
    "Connect timeout",
)
ANSI_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
XML_FIELD = re.compile(r"<(Code|Message)>([^<]*)</\1>")
MOST_CHARACTERS = 200


def store_failure(lake: Lake, error: BaseException) -> LakeError | None:
    """A LakeError of one line naming `lake` and the cause when `error`, or an error it was raised from or while
    handling, is a failure of `lake`'s object store; None for any other error, and for a lake on a local disk."""
    if not lake.on_object_store:
        return None
    text = "\n".join(_texts(error))
    if not any(marker in text for marker in STORE_MARKERS):
        return None
    return LakeError(f"the lake {lake}: {_cause(lake, text)}")


def settings_store_failure(settings: Settings | None, error: BaseException) -> LakeError | None:
    """`store_failure` of the lake `settings` configure (None when there are no settings yet, or no lake)."""
    if settings is None:
        return None
    from audit.io.lake import lake_of

    try:
        lake = lake_of(settings)
    except LakeError:
        return None
    return store_failure(lake, error)


def _texts(error: BaseException) -> list[str]:
    """The type (module-qualified) and message of `error` and of every error in its chain, colour codes removed."""
    texts, seen, current = [], set(), error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = type(current)
        texts.append(f"{kind.__module__}.{kind.__qualname__}: {ANSI_CODES.sub('', str(current))}")
        current = current.__cause__ or current.__context__
    return texts


def _cause(lake: Lake, text: str) -> str:
    bucket = lake.root.removeprefix("s3a://").split("/", 1)[0]
    if any(marker in text for marker in NO_BUCKET):
        return f"bucket {bucket} does not exist"
    if any(marker in text for marker in NO_CREDENTIALS):
        return "no credentials found (set [storage] access_key_id, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    if any(marker in text for marker in REFUSED):
        return f"access denied: the store refused the credentials, or they may not use bucket {bucket}"
    if any(marker in text for marker in UNREACHABLE):
        return f"endpoint {_endpoint(lake)} unreachable"
    return f"object store error: {_store_answer(text)}"


def _endpoint(lake: Lake) -> str:
    access = lake.access
    if access is None or not access.endpoint:
        region = access.region if access is not None else "us-east-1"
        return f"https://s3.{region}.amazonaws.com"
    return access.endpoint


def _store_answer(text: str) -> str:
    """The store's own error code and message from its XML; else the error's first line after its type."""
    fields = dict(XML_FIELD.findall(text))
    if fields:
        return " ".join(filter(None, (fields.get("Code"), fields.get("Message"))))[:MOST_CHARACTERS]
    first = text.splitlines()[0].split(": ", 1)[-1].strip()
    return first[:MOST_CHARACTERS]
