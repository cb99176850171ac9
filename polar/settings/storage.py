"""Where records, traces and artifacts are: the S3 bucket every process reads or writes."""

from __future__ import annotations

from pydantic import Field

from polar.settings.base import PolarSettings


class StorageSettings(PolarSettings):
    """The S3 endpoint, bucket, region and keys."""

    s3_endpoint: str | None = Field(
        default="http://127.0.0.1:8333", description="S3 endpoint (SeaweedFS); unset: AWS S3"
    )
    s3_bucket: str = Field(default="polar", description="bucket of records, traces, artifacts")
    s3_region: str = Field(default="us-east-1", description="S3 region")
    s3_access_key: str | None = Field(
        default=None, description="unset: boto3's own chain (role, AWS_* env); dev: generated"
    )
    s3_secret_key: str | None = Field(default=None, description="the secret of s3_access_key")
