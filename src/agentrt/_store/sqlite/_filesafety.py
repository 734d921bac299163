"""File-level safety of the database: owner-only creation, modes, owners, symlinks, sidecars.

Anyone who can write the database file (or its WAL) can forge an approval, so the
file mode is the security boundary. This module owns the checks made before and
after SQLite opens the file:

- a new database file is created 0600 whatever the umask (SQLite then gives its
  `-wal` and `-shm` files the database file's mode);
- the database, `-wal`, `-shm` and `-journal` (a hot journal is replayed into the
  database on open) are refused when writable by group or others or owned by
  another user; a sidecar that is not a regular file is refused;
- a file this process owns that others can read is tightened to 0600 by a writer;
- the database path itself must not be a symlink, and neither it nor a sidecar may
  have a second hard link (`HardLinkError`): another name for the file can sit in
  a directory with other rules, out of sight of these checks;
- a writer's open is refused when this process could not write the database, its
  `-wal` or `-shm`, or create a missing one in the directory (`check_writable`), and a
  reader's beside a `-wal` it cannot read (`unreadable_wal`);
- the directory holding the database must be writable by its owner only, and owned
  by this user or by root (`InsecureDirectoryError`): whoever can create files in
  it can plant a `-wal` or `-journal` before SQLite opens one (or swap the
  database for another file), which is a forged record. A sticky bit (as on
  `/tmp`) does not exempt a directory: it stops others renaming our files, not
  creating a sidecar name that does not exist yet.

Mode and owner checks are skipped where the OS has no POSIX modes.

It also owns `FileIdentity`, the check made around each commit, the store's and the
heartbeat's (decision 0155): SQLite writes on through the descriptors it opened, so a
commit counts only while the database file and its `-wal` at the path are still the
files opened.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import sys
from collections.abc import Callable

from ..._errors import (
    HardLinkError,
    InsecureDirectoryError,
    InsecureModeError,
    StoreError,
    SymlinkError,
)

FileId = tuple[int, int] | None
"""`(device, inode)` of the file at a path; None: no file there."""

POSIX_MODES = os.name == "posix"
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal", "-lock")
"""SQLite's own sidecars, and the writers' lock file (`_writer_turns`: it holds no data)."""
OWNER_ONLY = 0o600


def create_owner_only(path: str) -> bool:
    """Create an empty file at `path` with mode 0600; False if something already is there.

    `O_EXCL` never follows a symlink, so a planted link is reported, not written through.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, OWNER_ONLY)
    except FileExistsError:
        if os.path.islink(path):
            raise SymlinkError(f"{path} is a symlink; agentrt opens only the file itself") from None
        return False
    except FileNotFoundError as e:
        raise StoreError(f"cannot create {path}: its directory does not exist") from e
    except OSError as e:
        raise StoreError(f"cannot create {path}: {e.strerror}") from e
    try:
        # The umask may have cleared bits of 0600 (or, at 0, left them): say it exactly.
        if POSIX_MODES:
            os.fchmod(fd, OWNER_ONLY)
    finally:
        os.close(fd)
    return True


def check_database_file(path: str, *, tighten: bool) -> None:
    """Refuse a database path that is a symlink, not a regular file, or unsafe by mode/owner."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise StoreError(f"no database at {path}") from None
    except OSError as e:
        raise StoreError(f"cannot inspect {path}: {e.strerror}") from e
    if stat.S_ISLNK(st.st_mode):
        raise SymlinkError(f"{path} is a symlink; agentrt opens only the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"{path} is not a regular file")
    _check_links(path, st, what="database")
    _check_mode_and_owner(path, st, what="database", tighten=tighten)
    check_directory(path)


def check_directory(path: str) -> None:
    """Refuse the directory holding `path` when others may write it or it is another's."""
    if not POSIX_MODES:
        return
    directory = os.path.dirname(path) or "."
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        raise StoreError(f"cannot open {path}: its directory does not exist") from None
    except OSError as e:
        raise StoreError(f"cannot inspect the directory {directory}: {e.strerror}") from e
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InsecureDirectoryError(
            f"the directory {directory} is writable by group or others (mode {mode:04o}), so "
            "they could plant a -wal or -journal file beside the database or replace it: "
            "keep the database in a directory only its owner can write"
        )
    if st.st_uid not in (os.geteuid(), 0):
        raise InsecureDirectoryError(
            f"the directory {directory} is owned by uid {st.st_uid}, not by this process (uid "
            f"{os.geteuid()}) or root, and its owner could replace the database"
        )


def _check_links(path: str, st: os.stat_result, *, what: str) -> None:
    if st.st_nlink > 1:
        raise HardLinkError(
            f"{what} {path} has {st.st_nlink} hard links; agentrt opens only a file with one "
            "name, because another name for it can be changed out of sight of these checks"
        )


def check_sidecars(path: str, *, tighten: bool) -> None:
    """Refuse unsafe `-wal`, `-shm`, `-journal` or `-lock` files next to the database at `path`."""
    for suffix in SIDECAR_SUFFIXES:
        side = path + suffix
        try:
            st = os.lstat(side)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise InsecureModeError(f"cannot inspect {side}: {e.strerror}") from e
        if not stat.S_ISREG(st.st_mode):
            raise InsecureModeError(
                f"{side} is not a regular file (a {_kind(st.st_mode)}); refusing to open the "
                "database beside it"
            )
        _check_links(side, st, what=f"{suffix[1:]} file")
        _check_mode_and_owner(side, st, what=f"{suffix[1:]} file", tighten=tighten)


def check_all(path: str, *, tighten: bool) -> None:
    """The database file and its sidecars, as `check_database_file` and `check_sidecars`."""
    check_database_file(path, tighten=tighten)
    check_sidecars(path, tighten=tighten)


def refuse_readable(path: str) -> None:
    """Refuse the database at `path`, or a `-wal`, `-shm` or `-journal` beside it, that group
    or others may read: the explicit migration (`agentrt migrate`) changes nothing but the
    record, so it leaves the mode `check_all(tighten=True)` would tighten to the operator
    (decision 0201). After `check_all`: the files are regular and their own."""
    if not POSIX_MODES:
        return
    for suffix, what in (("", "database"), ("-wal", "wal file"), ("-shm", "shm file"),
                         ("-journal", "journal file")):  # fmt: skip
        try:
            mode = stat.S_IMODE(os.lstat(path + suffix).st_mode)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise InsecureModeError(f"cannot inspect {path + suffix}: {e.strerror}") from e
        if mode & 0o077:
            raise InsecureModeError(
                f"{what} {path + suffix} is readable by group or others (mode {mode:04o}); "
                "anyone who can read it can read every request and result it records. Make "
                "it 0600"
            )


WRITER_SIDECARS = ("-wal", "-shm")
"""What a writer writes beside the database (WAL mode): made by SQLite when missing."""

_READ_INSTEAD = (
    "open it read-only (open_existing(path, read_only=True), or the agentrt commands that "
    "only read: runs, show, events, verify) or make it writable"
)


def check_writable(path: str) -> None:
    """Refuse a writer's open of the database at `path` this process could not write.

    SQLite opens a database it cannot write read-only without a word, and the first
    write then fails ("attempt to write a readonly database"); a writer in a directory it
    cannot write fails with "unable to open database file" (no `-wal` can be made). A
    writer needs to write the database, its `-wal` and `-shm` (a read-only filesystem, a
    mode, an immutable file stop it), and to create whichever of the two is missing (the
    directory writable). Asked with `access(2)`, never by opening a descriptor: closing
    one this process opened on the database or its `-shm` would drop the POSIX locks
    SQLite holds there for another connection of this process. `StoreError`, one
    sentence naming the file, the cause, and that reading still works (decision 0175).
    """
    for suffix in ("", *WRITER_SIDECARS):
        name = path + suffix
        try:
            st = os.stat(name)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise StoreError(f"cannot inspect {name}: {e.strerror}") from e
        if _writable(name):
            continue
        what = "the database file" if not suffix else f"its {suffix} file {name}"
        raise StoreError(
            f"cannot open {path} for writing: {what} {_why_not_writable(name, st)}, so a "
            f"writer could not record anything; {_READ_INSTEAD}"
        )
    missing = [s for s in WRITER_SIDECARS if not os.path.lexists(path + s)]
    if missing and not directory_writable(path):
        directory = os.path.dirname(path) or "."
        raise StoreError(
            f"cannot open {path} for writing: its directory {directory} "
            f"{_why_directory(directory)}, so SQLite cannot create the "
            f"{' and '.join(missing)} file{'s' if len(missing) > 1 else ''} a writer needs "
            f"beside it; {_READ_INSTEAD}"
        )


READ_MEANWHILE = (
    "meanwhile it can be read: open_existing(path, read_only=True), or the agentrt "
    "commands that only read: runs, show, events, verify"
)


def turned_read_only(path: str) -> str | None:
    """What to say of the filesystem holding the database at `path` when it is read-only
    now, else None: asked after a write of an open store failed, for a filesystem turned
    read-only under it (decision 0208). ext4 mounted `errors=remount-ro` does so at its
    first error: every write then fails with `EROFS`, which SQLite reports as an I/O error
    (its `errno` lost), and neither `statvfs` nor `access(2)` says so (Linux 6.x marks it
    `emergency_ro`, the mount still `rw`). So, besides `statvfs`, the store's lock file (its
    own, `_writer_turns`; the database file where there is none) has its times set to now:
    no descriptor opened (closing one would drop SQLite's POSIX locks), refused with `EROFS`
    there only. Never through a symlink: one planted at either path since the open has its
    own times set (it is on the store's filesystem), never its target's, which may be on
    another filesystem, read-only or not."""
    if _read_only_fs(os.path.dirname(path) or "."):
        return _TURNED_READ_ONLY.format(path=path)
    for probe in (path + "-lock", path):
        try:
            _touch_not_following(probe)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno == errno.EROFS:
                return _TURNED_READ_ONLY.format(path=path)
        return None
    return None


def _touch_not_following(path: str) -> None:
    """Set the times of `path` itself to now, a symlink's own (`FileNotFoundError` for a
    symlink where a platform cannot set a link's times: passed over, not followed)."""
    if os.utime in os.supports_follow_symlinks:
        os.utime(path, follow_symlinks=False)
    elif os.path.islink(path):
        raise FileNotFoundError(errno.ENOENT, "a symlink's own times cannot be set here", path)
    else:
        os.utime(path)


_TURNED_READ_ONLY = (
    "the filesystem holding {path} is read-only (it was remounted read-only under the "
    "open store, as ext4 mounted errors=remount-ro does after an error)"
)


def unreadable_wal(path: str, said: str) -> StoreError:
    """The refusal of a reader beside a `-wal` SQLite cannot read in a directory this
    process cannot write: the `-wal` may hold commits the database file does not, so
    reading the file alone (`immutable`) could show a record with its last commits lost."""
    directory = os.path.dirname(path) or "."
    return StoreError(
        f"cannot read {path}: its -wal file may hold commits that are not in the database "
        f"file yet, and SQLite cannot read it ({said}) because its -shm file is missing or "
        f"unusable and the directory {directory} {_why_directory(directory)}, so none can "
        "be made; open it once where it is writable (a writer folds the -wal in) or copy "
        "the database with its -wal to a writable directory and read the copy"
    )


def _writable(path: str) -> bool:
    """Whether this process may write the file at `path`: its mode and filesystem allow it
    (`access(2)`) and its inode is neither append-only nor immutable."""
    return _may_write(path) and not _append_only(path)


def _may_write(path: str) -> bool:
    if os.access in os.supports_effective_ids:
        return os.access(path, os.W_OK, effective_ids=True)
    return os.access(path, os.W_OK)


_STATX_ATTR_IMMUTABLE = 0x10
_STATX_ATTR_APPEND = 0x20
_AT_FDCWD = -100
_inode_flags: Callable[[str], int] | None = None  # set at the first writer's open


def _append_only(path: str) -> bool:
    """Whether the file at `path` is append-only (or immutable) by its inode's flags.

    `access(2)` says W_OK for an append-only file (`chattr +a`): only an open for writing
    without O_APPEND is refused (EPERM), so SQLite opens it read-only without a word. The
    flag is read with `statx(2)` (by path, no descriptor: closing one would drop the
    process's POSIX locks on the file); none where there is no `statx` (not Linux, an
    old libc) or it fails, as before this check."""
    global _inode_flags
    if _inode_flags is None:
        _inode_flags = _find_inode_flags()
    return bool(_inode_flags(path) & (_STATX_ATTR_APPEND | _STATX_ATTR_IMMUTABLE))


def _no_flags(path: str) -> int:
    return 0


def _find_inode_flags() -> Callable[[str], int]:
    """The inode flags `statx(2)` reports of a path (those it knows), where libc has it."""
    if not sys.platform.startswith("linux"):
        return _no_flags
    import ctypes  # here: only a writer's open needs it (2.7 ms to import)

    try:
        statx = ctypes.CDLL(None, use_errno=True).statx
    except (AttributeError, OSError):
        return _no_flags
    statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    statx.restype = ctypes.c_int

    def flags(path: str) -> int:
        buf = ctypes.create_string_buffer(256)  # struct statx
        if statx(_AT_FDCWD, os.fsencode(path), 0, 0, buf) != 0:
            return 0
        # stx_attributes at 8, stx_attributes_mask (the flags this filesystem reports) at 56
        attributes, known = (
            struct.unpack_from("=Q", buf.raw, 8)[0],
            struct.unpack_from("=Q", buf.raw, 56)[0],
        )
        return int(attributes & known)

    return flags


def _why_not_writable(path: str, st: os.stat_result) -> str:
    """Why this process may not write the file at `path`, in words."""
    if _read_only_fs(path):
        return "is on a read-only filesystem"
    if POSIX_MODES and os.geteuid() != 0 and not st.st_mode & stat.S_IWUSR:
        return f"is not writable by this process (mode {stat.S_IMODE(st.st_mode):04o})"
    if POSIX_MODES and os.geteuid() == 0:
        return "may not be written even by root (an immutable or append-only file: see lsattr)"
    return "is not writable by this process (an immutable or append-only file, or an ACL)"


def _why_directory(directory: str) -> str:
    if _read_only_fs(directory):
        return "is on a read-only filesystem"
    return "is not writable by this process"


def _read_only_fs(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def directory_writable(path: str) -> bool:
    """Whether this process may create files beside `path` (SQLite needs it for `-shm`)."""
    return os.access(os.path.dirname(path) or ".", os.W_OK)


def _check_mode_and_owner(path: str, st: os.stat_result, *, what: str, tighten: bool) -> None:
    if not POSIX_MODES:
        return
    lock = what == "lock file"  # the writers' turns (decision 0106): it holds no record
    if st.st_uid != os.geteuid():
        harm = "could hold up every writer" if lock else "could rewrite any record"
        raise InsecureModeError(
            f"{what} {path} is owned by uid {st.st_uid}, not by this process (uid "
            f"{os.geteuid()}); its owner {harm}"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        harm = "hold up every writer to its busy timeout" if lock else "forge an approval"
        raise InsecureModeError(
            f"{what} {path} is writable by group or others (mode {mode:04o}); anyone who can "
            f"write it can {harm}. Make it 0600"
        )
    if tighten and mode & 0o077:
        _tighten(path, sentence=what in ("database", "wal file", "shm file"))


def _path_only() -> int | None:
    """`O_PATH` where a descriptor opened with it can be changed through `/proc/self/fd`
    (Linux with `/proc` mounted); None elsewhere."""
    flag = getattr(os, "O_PATH", None)
    if flag is None or not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/fd"):
        return None
    return int(flag)


_PATH_ONLY = _path_only()


def _tighten(path: str, *, sentence: bool = False) -> None:
    """Make the file at `path` 0600. `sentence`: a file `check_writable` checks next, which,
    where this process may not write it (an immutable file, a read-only filesystem: the
    chmod fails too), is left as it is, for `check_writable` to refuse the writer saying so
    (not "cannot tighten": its mode lets nobody else write it)."""
    # Open without following links and chmod what was opened, so a file swapped in after
    # the lstat is never the one changed. Where it can (Linux), by an `O_PATH` descriptor:
    # closing one never drops the POSIX locks this process holds on the file, where closing
    # any other descriptor of it drops them all (SQLite's, of another connection of this
    # process, on the database or its -shm: another process could then write beside it).
    by_path = _PATH_ONLY is not None
    flags = (
        _PATH_ONLY | os.O_NOFOLLOW
        if _PATH_ONLY is not None
        else os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    )
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SymlinkError(f"{path} became a symlink while it was being checked") from e
        raise InsecureModeError(f"cannot tighten {path} to 0600: {e.strerror}") from e
    try:
        if by_path:
            # An `O_PATH | O_NOFOLLOW` open of a symlink opens the link itself.
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SymlinkError(f"{path} became a symlink while it was being checked")
            os.chmod(f"/proc/self/fd/{fd}", OWNER_ONLY)
        else:
            os.fchmod(fd, OWNER_ONLY)
    except OSError as e:
        if sentence and e.errno in (errno.EPERM, errno.EROFS) and not _writable(path):
            return
        raise InsecureModeError(f"cannot tighten {path} to 0600: {e.strerror}") from e
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _file_id(path: str) -> FileId:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class FileIdentity:
    """The database file and `-wal` a connection writes, by device and inode, against the
    files now at the database's path (decision 0155).

    One per connection that commits (the store's, the heartbeat's), used by its own thread
    only: `moved` updates what it knows when the `-wal` is first made."""

    __slots__ = ("known", "path")

    def __init__(self, path: str, known: tuple[FileId, FileId] | None = None) -> None:
        self.path = path
        self.known = known if known is not None else self.now()
        """The database file's and the `-wal`'s ids when opened (the `-wal` when first seen)."""

    def now(self) -> tuple[FileId, FileId]:
        """The ids of the files at the database's path and its `-wal`'s now."""
        return _file_id(self.path), _file_id(self.path + "-wal")

    def moved(self) -> bool:
        """Whether the database file or its `-wal` at the path is no longer the one the
        connection writes (deleted, or replaced by another file): what it commits then is in
        no file a restart reads. SQLite removes the `-wal` only when the last connection
        closes, never while this one is open."""
        known = self.known
        now = self.now()
        if now == known:
            return False
        if known[1] is None and now[0] == known[0] and now[1] is not None:
            self.known = now  # the -wal was made since the open
            return False
        return True
