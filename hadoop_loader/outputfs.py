"""The loader's output file system: a local path (``file://``, the embedded
default), ``hdfs://namenode:port/path`` or ``s3a://bucket/path``, through
``pyarrow.fs`` in the driver and in the tasks, and as the URI Spark reads and
writes (Spark's own Hadoop file systems).

Every file operation of the loader goes through this module, with paths
relative to the output root ("/"-separated), so the code that the tests run
on the local file system is the code that runs on the others. What differs,
and matters for exactly-once:

* local and HDFS: a rename is atomic, and a new commit file is claimed by
  a create-if-absent (a hard link locally; HDFS's rename refuses an existing
  target); a load holds a lock (``flock``) locally;
* S3: a new object appears whole (so a commit is one PUT), but a "move" is
  a copy and a delete: the publish manifest makes a move interrupted
  half-way finishable; there is no lock (one load at a time comes from the
  scheduler: warehouse_load runs one DAG run at a time);
* replacing a whole directory at once (``swap_dir``, a reloaded hour) is
  one ``renameat2(RENAME_EXCHANGE)`` locally; HDFS and S3 have no such
  call (two renames leave a moment with no directory), so there it is
  refused.

HDFS needs Hadoop's native client library (libhdfs.so, ARROW_LIBHDFS_DIR)
and its jars on the CLASSPATH (``hadoop classpath --glob``) on the driver and
every executor, as pyarrow's documentation says; S3 takes credentials from
the usual AWS environment and files, and an S3-compatible server's address
from the output's query (``s3://bucket/path?endpoint_override=host:port&
scheme=http``). HDFS cannot be run on the machines this project is developed
on (docs/loader.md); S3's file operations, the publish and its recovery are
tested against a real S3 server, Ceph's RADOS gateway
(tests/hadoop_loader/test_s3_output.py).
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import posixpath
import urllib.parse
import uuid

#: renameat2's flag: swap the two paths, both must exist (linux/fs.h)
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def exchange(a: str, b: str) -> None:
    """Swap two local paths (directories or files) in one step: after it,
    ``a`` names what ``b`` named and the other way round; a process opening
    either path sees one or the other, never neither (Linux's
    ``renameat2(RENAME_EXCHANGE)``, glibc 2.28 and later; ext4, xfs, btrfs
    and tmpfs have it). OSError when the call or the file system lacks it."""
    call = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if call is None:
        raise OSError(errno.ENOSYS, "this C library has no renameat2", a)
    if call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"renameat2(RENAME_EXCHANGE) of {a} and {b}: "
                            f"{os.strerror(code)}", a)


class OutputError(RuntimeError):
    """The output cannot be used (a bad URI, a file system not reachable)."""


#: what an s3:// or s3a:// output's query may set (pyarrow's S3FileSystem's
#: own names, as its FileSystem.from_uri takes them)
S3_QUERY = ("endpoint_override", "scheme", "region")


def s3_options(output: str, query: str) -> dict[str, str]:
    """pyarrow S3FileSystem options from an S3 output's query: nothing for
    AWS itself (region and credentials come from the environment, the
    instance profile included); ``?endpoint_override=host:port&scheme=http``
    for an S3-compatible server (pyarrow ignores AWS_ENDPOINT_URL). Uploads
    send checksums only when an operation requires one: the SDK's newer
    default (streamed uploads with trailing checksums) is refused by S3
    servers other than AWS's (Ceph 16's gateway answers 411), and AWS accepts
    both. The SDK reads this setting (set below, at import) when a file
    system is made."""
    options: dict[str, str] = {}
    for name, values in urllib.parse.parse_qs(query, keep_blank_values=True).items():
        if name not in S3_QUERY:
            raise OutputError(f"output {output}: unknown S3 setting {name!r} (known: "
                              f"{', '.join(S3_QUERY)})")
        if name == "scheme" and values[-1] not in ("http", "https"):
            raise OutputError(f"output {output}: scheme must be http or https")
        options[name] = values[-1]
    return options


# S3 uploads send checksums only when an operation requires one (s3_options
# says why): set once, when this module is imported, before the threads that
# Spark and kazoo start, for every S3 client the process makes; a value the
# environment already has is kept
os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")


class OutputFS:
    def __init__(self, output: str) -> None:
        self.output = output
        parsed = urllib.parse.urlsplit(output)
        scheme = parsed.scheme if "://" in output else ""
        import pyarrow.fs as pafs
        if scheme in ("", "file"):
            path = output[len("file://"):] if scheme == "file" else output
            self.kind = "local"
            self.fs = pafs.LocalFileSystem()
            self.root = os.path.abspath(path)
            self._spark_root = self.root
        elif scheme == "hdfs":
            self.kind = "hdfs"
            try:
                self.fs = pafs.HadoopFileSystem(parsed.hostname or "default", parsed.port or 0)
            except OSError as exc:
                raise OutputError(f"output {output}: HDFS cannot be reached from here: {exc} "
                                  f"(it needs Hadoop's libhdfs.so and CLASSPATH; see "
                                  f"docs/loader.md)") from None
            self.root = parsed.path or "/"
            self._spark_root = output.rstrip("/")
        elif scheme in ("s3a", "s3"):
            self.kind = "s3"
            self.fs = pafs.S3FileSystem(**s3_options(output, parsed.query))
            self.root = f"{parsed.netloc}{parsed.path}".rstrip("/")
            self._spark_root = f"s3a://{self.root}"
        else:
            raise OutputError(f"output {output}: a local path, file://, hdfs:// or s3a:// URI")
        self.atomic_rename = self.kind != "s3"

    # ------------------------------------------------------------ paths

    def path(self, *parts: str) -> str:
        """The file system's path of ``parts`` (relative to the root)."""
        return posixpath.join(self.root, *parts) if parts else self.root

    def spark_uri(self, *parts: str) -> str:
        """What Spark reads or writes for ``parts``."""
        return posixpath.join(self._spark_root, *parts) if parts else self._spark_root

    def local_path(self, *parts: str) -> str | None:
        return self.path(*parts) if self.kind == "local" else None

    # ------------------------------------------------------------ queries

    def _info(self, *parts: str):
        return self.fs.get_file_info(self.path(*parts))

    def exists(self, *parts: str) -> bool:
        import pyarrow.fs as pafs
        return self._info(*parts).type != pafs.FileType.NotFound

    def is_dir(self, *parts: str) -> bool:
        import pyarrow.fs as pafs
        return self._info(*parts).type == pafs.FileType.Directory

    def listdir(self, *parts: str) -> list[str]:
        """Names in a directory, sorted; [] when it does not exist."""
        import pyarrow.fs as pafs
        selector = pafs.FileSelector(self.path(*parts), allow_not_found=True)
        return sorted(posixpath.basename(i.path) for i in self.fs.get_file_info(selector))

    def files(self, *parts: str) -> list[tuple[str, int]]:
        """(path relative to the root, size) of every file under a directory."""
        import pyarrow.fs as pafs
        selector = pafs.FileSelector(self.path(*parts), recursive=True, allow_not_found=True)
        root = self.root.rstrip("/") + "/"
        return sorted((i.path[len(root):] if i.path.startswith(root) else i.path, i.size)
                      for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.File)

    def read_text(self, *parts: str) -> str:
        with self.fs.open_input_stream(self.path(*parts)) as f:
            return f.read().decode()

    def parquet_rows(self, *parts: str) -> int:
        """Rows of a Parquet file, from its footer."""
        import pyarrow.parquet as pq
        with self.fs.open_input_file(self.path(*parts)) as f:
            return pq.ParquetFile(f).metadata.num_rows

    def parquet_column(self, columns: list[str], *parts: str):
        """Columns of a Parquet file (nested fields by dotted path:
        ``header.time_ms``), as a pyarrow table: only they are read."""
        import pyarrow.parquet as pq
        with self.fs.open_input_file(self.path(*parts)) as f:
            return pq.ParquetFile(f).read(columns=columns)

    # ------------------------------------------------------------ changes

    def makedirs(self, *parts: str) -> None:
        self.fs.create_dir(self.path(*parts), recursive=True)

    def open_output(self, *parts: str):
        """A new file (its directory made first), as a writable stream."""
        self.makedirs(*parts[:-1]) if len(parts) > 1 else None
        return self.fs.open_output_stream(self.path(*parts))

    def write_bytes(self, parts: tuple[str, ...], data: bytes) -> None:
        """Replace a file whole: written aside and renamed where renames are
        atomic (a reader never sees half of it), one PUT on S3."""
        directory, name = parts[:-1], parts[-1]
        self.makedirs(*directory)
        if not self.atomic_rename:
            with self.fs.open_output_stream(self.path(*parts)) as f:
                f.write(data)
            return
        tmp = (*directory, f".{name}.{uuid.uuid4().hex}.tmp")
        if self.kind == "local":
            with open(self.path(*tmp), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        else:
            with self.fs.open_output_stream(self.path(*tmp)) as f:
                f.write(data)
        self.fs.move(self.path(*tmp), self.path(*parts))

    def write_text(self, parts: tuple[str, ...], text: str) -> None:
        self.write_bytes(parts, text.encode())

    def create_new(self, parts: tuple[str, ...], text: str) -> bool:
        """Create a file only if none is there; False if one was. Locally a
        hard link of a written temporary file (atomic); elsewhere a check
        then a write (two loads at once are kept apart by the scheduler)."""
        directory, name = parts[:-1], parts[-1]
        self.makedirs(*directory)
        if self.kind == "local":
            tmp = self.path(*directory, f".{name}.{uuid.uuid4().hex}.tmp")
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.path(*parts))
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        if self.exists(*parts):
            return False
        self.write_text(parts, text)
        return True

    def move(self, source: str, target: str) -> bool:
        """Move a file (paths relative to the root), making the target's
        directory; False if the source is gone (moved before)."""
        if not self.exists(source):
            return False
        self.makedirs(posixpath.dirname(target))
        self.fs.move(self.path(source), self.path(target))
        return True

    def upload(self, source_fs: "OutputFS", source: str, target: str) -> bool:
        """Copy a file of another file system (``source`` relative to its
        root) to ``target`` here, then delete the source: a move across file
        systems. On S3 the object appears whole (one PUT, or a multipart
        upload completed at once). False if the source is gone (uploaded
        before)."""
        import pyarrow.fs as pafs
        if not source_fs.exists(source):
            return False
        self.makedirs(posixpath.dirname(target))
        pafs.copy_files(source_fs.path(source), self.path(target),
                        source_filesystem=source_fs.fs, destination_filesystem=self.fs)
        source_fs.delete_file(source)
        return True

    def swap_dir(self, new: str, target: str, aside: str) -> bool:
        """Put directory ``new`` at ``target`` in one step (paths relative to
        the root); what was at ``target`` ends at ``aside`` (made for it).
        A reader listing ``target`` sees the old directory whole or the new
        one whole, never a mix and never nothing: locally the two are
        exchanged by one ``renameat2`` (or ``new`` renamed into place when
        ``target`` did not exist), then the old one is renamed aside.
        True when there was an old directory. OutputError elsewhere: HDFS
        and S3 have no atomic exchange."""
        if self.kind != "local":
            raise OutputError(f"output {self.output}: replacing a directory at once needs a "
                              f"local output (HDFS and S3 cannot exchange two directories "
                              f"atomically)")
        self.makedirs(posixpath.dirname(target))
        if not self.exists(target):
            os.rename(self.path(new), self.path(target))
            return False
        exchange(self.path(new), self.path(target))
        self.makedirs(posixpath.dirname(aside))
        os.rename(self.path(new), self.path(aside))
        return True

    def size(self, *parts: str) -> int:
        """A file's size in bytes (-1 if there is no such file)."""
        info = self._info(*parts)
        return info.size if info.size is not None else -1

    def modified_s(self, *parts: str) -> float:
        """Last modification of a file or directory (seconds since the epoch)."""
        return self._info(*parts).mtime_ns / 1e9

    def delete_file(self, *parts: str) -> None:
        try:
            self.fs.delete_file(self.path(*parts))
        except FileNotFoundError:
            pass

    def delete_dir(self, *parts: str) -> None:
        if self.exists(*parts):
            self.fs.delete_dir(self.path(*parts))

    def write_json(self, parts: tuple[str, ...], data) -> None:
        self.write_text(parts, json.dumps(data, indent=1, sort_keys=True))

