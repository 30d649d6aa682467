"""Where the warehouse and the savepoint root live: a local folder, or S3-compatible storage (``s3a://``).

Spark and Delta reach ``s3a://`` through hadoop-aws. Everything Lakestate
does to those folders itself (the catalog's JSON files, the lease, reading a
Delta log, the Parquet files the subtasks write, folder listings and
deletes) goes through ``location``: a ``pathlib.Path`` for a local path, an
``ObjectPath`` with the same methods for ``s3a://bucket/key``. Object stores
have no folders and no rename, so on them:

- a folder exists when something lies under it; ``mkdir`` does nothing;
- a file appears whole when its upload completes: ``write_atomic`` writes in
  place (locally it writes a temporary file and renames it);
- ``create_exclusive`` (the lease's compare-and-swap) is a conditional
  ``PUT`` with ``If-None-Match: *``, which S3 has honoured since 2024.

The connection comes from the standard AWS variables: ``AWS_ENDPOINT_URL``
(an S3-compatible server such as MinIO or moto; leave unset for AWS),
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``. An
``ObjectPath`` carries them (``S3Options``), so one shipped to a Spark
executor writes to the same place without any set-up there.

No Spark import here: the executors use it.
"""
from __future__ import annotations

import io
import json
import os
import posixpath
import shutil
import uuid
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from .errors import ConfigError

SCHEMES = ("s3a", "s3")


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible store (from the AWS environment variables)."""

    endpoint: str | None = None  # "http://127.0.0.1:9000"; None: AWS itself
    access_key: str | None = None
    secret_key: str | None = None
    region: str = "us-east-1"

    @classmethod
    def from_env(cls) -> "S3Options":
        env = os.environ
        return cls(env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
                   env.get("AWS_ACCESS_KEY_ID") or None, env.get("AWS_SECRET_ACCESS_KEY") or None,
                   env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1")

    def __repr__(self) -> str:  # never print the secret
        return f"S3Options(endpoint={self.endpoint!r}, region={self.region!r})"

    def spark_conf(self) -> dict[str, str]:
        """The hadoop-aws settings that make Spark's ``s3a://`` reach the same store."""
        conf = {"fs.s3a.endpoint.region": self.region}
        if self.endpoint:
            parsed = urlparse(self.endpoint)
            conf.update({"fs.s3a.endpoint": self.endpoint, "fs.s3a.path.style.access": "true",
                         "fs.s3a.connection.ssl.enabled": str(parsed.scheme == "https").lower()})
        if self.access_key and self.secret_key:
            conf.update({"fs.s3a.access.key": self.access_key, "fs.s3a.secret.key": self.secret_key,
                         "fs.s3a.aws.credentials.provider":
                             "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"})
        return conf


_FILESYSTEMS: dict = {}


def _filesystem(options: S3Options):
    fs = _FILESYSTEMS.get(options)
    if fs is None:
        from pyarrow import fs as pafs

        kwargs = {"region": options.region}
        if options.endpoint:
            parsed = urlparse(options.endpoint)
            kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")
        if options.access_key and options.secret_key:
            kwargs.update(access_key=options.access_key, secret_key=options.secret_key)
        fs = _FILESYSTEMS[options] = pafs.S3FileSystem(**kwargs)
    return fs


def is_remote(path) -> bool:
    return isinstance(path, ObjectPath) or (isinstance(path, str) and path.split("://", 1)[0] in SCHEMES
                                            and "://" in path)


def options_of(path) -> S3Options | None:
    """The connection an ObjectPath carries (None for a local path): for an ``OutputTable``."""
    return path.options if isinstance(path, ObjectPath) else None


def location(path, options: S3Options | None = None):
    """``path`` (a string, Path or ObjectPath) as a Path (local) or ObjectPath (``s3a://``, ``s3://``)."""
    if isinstance(path, ObjectPath):
        return path
    if is_remote(str(path)):
        return ObjectPath(str(path), options or S3Options.from_env())
    return Path(path)


@dataclass(frozen=True)
class _Stat:
    st_size: int
    st_mtime: float


class ObjectPath:
    """A ``pathlib.Path``-like path in an S3 bucket: ``s3a://bucket/key``."""

    __slots__ = ("scheme", "key", "options")

    def __init__(self, uri: str, options: S3Options | None = None):
        scheme, _, rest = uri.partition("://")
        if scheme not in SCHEMES or not rest.strip("/"):
            raise ConfigError(f"{uri!r} is not an object storage path: write it as s3a://<bucket>/<folder>")
        key = posixpath.normpath("/" + rest).lstrip("/")
        if key.startswith(".."):
            raise ConfigError(f"{uri!r} leaves its bucket")
        self.scheme, self.key, self.options = scheme, key, options or S3Options.from_env()

    # -- pure path operations --
    def __str__(self) -> str:
        return f"{self.scheme}://{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectPath) and (self.scheme, self.key) == (other.scheme, other.key)

    def __hash__(self) -> int:
        return hash((self.scheme, self.key))

    def __lt__(self, other: "ObjectPath") -> bool:
        return self.key < other.key

    def __truediv__(self, other) -> "ObjectPath":
        other = str(other)
        if other.startswith("/") or "://" in other:
            raise ValueError(f"cannot join {other!r} to {self}")
        return ObjectPath(f"{self}/{other}", self.options)

    @property
    def bucket(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def parent(self) -> "ObjectPath":
        if "/" not in self.key:
            return self
        return ObjectPath(f"{self.scheme}://{self.key.rsplit('/', 1)[0]}", self.options)

    @property
    def parents(self) -> list["ObjectPath"]:
        out, p = [], self
        while "/" in p.key:
            p = p.parent
            out.append(p)
        return out

    def with_name(self, name: str) -> "ObjectPath":
        return self.parent / name

    def relative_to(self, other: "ObjectPath") -> PurePosixPath:
        if not (isinstance(other, ObjectPath) and (self == other or other in self.parents)):
            raise ValueError(f"{self} is not inside {other}")
        return PurePosixPath(self.key[len(other.key):].lstrip("/") or ".")

    def is_absolute(self) -> bool:
        return True

    def expanduser(self) -> "ObjectPath":
        return self

    def resolve(self) -> "ObjectPath":
        return self

    # -- the store --
    @property
    def fs(self):
        return _filesystem(self.options)

    def _info(self):
        return self.fs.get_file_info(self.key)

    def exists(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type != FileType.NotFound

    def is_dir(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type == FileType.Directory

    def is_file(self) -> bool:
        from pyarrow.fs import FileType

        return self._info().type == FileType.File

    def _children(self, recursive: bool):
        from pyarrow.fs import FileSelector

        return self.fs.get_file_info(FileSelector(self.key, allow_not_found=True, recursive=recursive))

    def iterdir(self):
        for info in self._children(False):
            yield ObjectPath(f"{self.scheme}://{info.path}", self.options)

    def glob(self, pattern: str):
        if "/" in pattern or "**" in pattern:
            raise NotImplementedError("ObjectPath.glob matches names in one folder only")
        return (p for p in self.iterdir() if fnmatch(p.name, pattern))

    def rglob(self, pattern: str):
        for info in self._children(True):
            p = ObjectPath(f"{self.scheme}://{info.path}", self.options)
            if fnmatch(p.name, pattern):
                yield p

    def files(self) -> list["ObjectPath"]:
        """Every object under this folder, at any depth."""
        from pyarrow.fs import FileType

        return [ObjectPath(f"{self.scheme}://{i.path}", self.options) for i in self._children(True)
                if i.type == FileType.File]

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: an object store's folders exist through what lies in them."""

    def rmdir(self) -> None:
        if any(True for _ in self.iterdir()):
            raise OSError(39, "Directory not empty", str(self))
        self._drop_marker()

    def _drop_marker(self) -> None:
        from pyarrow.fs import FileType

        if self._info().type == FileType.Directory:  # an empty-folder marker some writers leave
            try:
                self.fs.delete_dir(self.key)
            except OSError:
                pass

    def unlink(self, missing_ok: bool = False) -> None:
        from pyarrow.fs import FileType

        if self._info().type != FileType.File:
            if missing_ok:
                return
            raise FileNotFoundError(2, "No such file", str(self))
        self.fs.delete_file(self.key)

    def stat(self) -> _Stat:
        from pyarrow.fs import FileType

        info = self._info()
        if info.type != FileType.File:
            raise FileNotFoundError(2, "No such file", str(self))
        return _Stat(int(info.size), info.mtime.timestamp() if info.mtime else 0.0)

    def read_bytes(self) -> bytes:
        try:
            with self.fs.open_input_stream(self.key) as f:
                return f.read()
        except FileNotFoundError:
            raise
        except OSError as e:
            if "not exist" in str(e).lower() or "nosuchkey" in str(e).lower():
                raise FileNotFoundError(2, "No such file", str(self)) from None
            raise

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def write_bytes(self, data: bytes) -> None:
        with self.fs.open_output_stream(self.key) as f:
            f.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())

    def open(self, mode: str = "r"):
        if mode in ("r", "rb"):
            raw = io.BytesIO(self.read_bytes())
            return raw if mode == "rb" else io.TextIOWrapper(raw)
        if mode in ("w", "wb"):
            stream = self.fs.open_output_stream(self.key)
            return stream if mode == "wb" else io.TextIOWrapper(stream)
        raise ValueError(f"mode {mode!r} is not supported on object storage")

    def rename(self, target: "ObjectPath") -> "ObjectPath":
        """Copy, then delete (object stores have no rename): not atomic."""
        for f in self.files() if self.is_dir() else [self]:
            dest = target if f == self else target / f.relative_to(self).as_posix()
            self.fs.copy_file(f.key, dest.key)
        rmtree(self)
        return target


def listdir(path) -> list[str]:
    """The names in folder ``path`` (FileNotFoundError when there is none)."""
    path = location(path)
    if isinstance(path, ObjectPath):
        names = [p.name for p in path.iterdir()]
        if not names and not path.exists():
            raise FileNotFoundError(2, "No such folder", str(path))
        return names
    return os.listdir(path)


def rmtree(path, ignore_errors: bool = False) -> None:
    path = location(path)
    if isinstance(path, ObjectPath):
        try:
            for f in path.files():
                f.unlink(missing_ok=True)
            path._drop_marker()
        except OSError:
            if not ignore_errors:
                raise
        return
    shutil.rmtree(path, ignore_errors=ignore_errors)


def write_atomic(path, text: str) -> None:
    """Write ``text`` as file ``path`` so that no reader ever sees half of it."""
    path = location(path)
    if isinstance(path, ObjectPath):
        path.write_text(text)  # an upload appears whole or not at all
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    _publish(path, text, os.replace)


def create_exclusive(path, text: str) -> None:
    """Create file ``path`` with ``text`` only if it does not exist (FileExistsError otherwise), atomically
    against any number of concurrent creators: the lease's compare-and-swap."""
    path = location(path)
    if isinstance(path, ObjectPath):
        _put_if_absent(path, text.encode())
        return
    _publish(path, text, os.link)  # a link is an atomic create-if-absent, with the content already there


def _publish(path: Path, text: str, move) -> None:
    """Write ``text`` to a temporary file beside ``path``, synced, then ``move`` it to ``path``."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        move(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _put_if_absent(path: ObjectPath, data: bytes) -> None:
    try:
        import boto3
        from botocore.exceptions import ClientError
    except ImportError:
        raise ConfigError("a lease on object storage needs boto3 (conditional writes): pip install boto3") from None
    o = path.options
    client = _S3_CLIENTS.get(o)
    if client is None:
        client = _S3_CLIENTS[o] = boto3.client("s3", endpoint_url=o.endpoint, region_name=o.region,
                                               aws_access_key_id=o.access_key, aws_secret_access_key=o.secret_key)
    bucket, _, key = path.key.partition("/")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            raise FileExistsError(17, "File exists", str(path)) from None
        raise


_S3_CLIENTS: dict = {}


def read_json(path):
    return json.loads(location(path).read_text())


def read_parquet(path, columns: list[str] | None = None):
    """A Parquet file as an Arrow table."""
    import pyarrow.parquet as pq

    path = location(path)
    if isinstance(path, ObjectPath):
        return pq.read_table(path.key, columns=columns, filesystem=path.fs)
    return pq.read_table(path, columns=columns)


def output_stream(path):
    """A writable binary stream creating file ``path`` (its folders as needed)."""
    path = location(path)
    if isinstance(path, ObjectPath):
        return path.fs.open_output_stream(path.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")


def walk_files(root) -> list:
    """Every file under folder ``root``, skipping folders whose names start with '_' or '.' (a Delta log)."""
    root = location(root)
    if isinstance(root, ObjectPath):
        return [f for f in root.files()
                if not any(part.startswith(("_", ".")) for part in f.relative_to(root).parts[:-1])]
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        out.extend(Path(folder) / n for n in names)
    return out


def remove_empty_folders(root) -> None:
    """Remove the folders under ``root`` (and ``root``) left empty, those that can be; nothing to do on object
    storage."""
    root = location(root)
    if isinstance(root, ObjectPath) or not root.is_dir():
        return
    for folder, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
        try:
            if not os.listdir(folder):
                os.rmdir(folder)
        except OSError:
            pass  # a mount point (EBUSY), a read-only volume, or a writer that just added a file: it stays


def check_bucket(path: ObjectPath, what: str, fix: str) -> None:
    """Refuse, before anything is written, a bucket that does not exist or cannot be reached."""
    from pyarrow.fs import FileType

    try:
        info = path.fs.get_file_info(path.bucket)
    except OSError as e:
        raise ConfigError(f"cannot reach the {what} {path}: {e}; check AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and "
                          f"AWS_SECRET_ACCESS_KEY") from None
    if info.type == FileType.NotFound:
        raise ConfigError(f"the bucket {path.bucket!r} of the {what} {path} does not exist: create it, or {fix}")
