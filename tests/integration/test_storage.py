"""polar.storage.Storage on the suite's real SeaweedFS: obstore reads, writes and lists."""

from __future__ import annotations

import secrets

import pytest

from polar.storage import Storage


def test_keys_read_back_as_written_and_list_by_plain_prefix(storage: Storage) -> None:
    root = f"storage-test-{secrets.token_hex(3)}/"
    names = ["a b.txt", "ü.txt", "x%20y", "q?=&.txt", "plus+sign", "dir/inner.txt", "dir2"]
    for i, name in enumerate(names):
        assert storage.put_bytes(root + name, str(i).encode(), "text/plain") == 1
    for i, name in enumerate(names):
        assert storage.get_bytes(root + name) == str(i).encode()
        assert storage.exists(root + name)
    # the keys are stored as given: boto3 lists the same names
    listed = storage.boto_client().list_objects_v2(Bucket=storage.bucket, Prefix=root)
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(root + n for n in names)
    assert storage.list_keys(root) == sorted(root + n for n in names)
    # a prefix is a plain string prefix, not a folder: "dir" takes dir/… and dir2
    assert storage.list_keys(root + "dir") == [root + "dir/inner.txt", root + "dir2"]
    assert storage.list_keys(root + "dir/") == [root + "dir/inner.txt"]
    assert storage.list_keys(root + "nothing") == []


def test_a_missing_key_is_a_key_error_and_does_not_exist(storage: Storage) -> None:
    key = f"storage-test-{secrets.token_hex(3)}/missing"
    assert not storage.exists(key)
    with pytest.raises(KeyError):
        storage.get_bytes(key)
