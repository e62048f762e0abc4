"""The one way scripted/export.py writes a model folder into a repository.

A folder is built complete in a private staging folder next to it (<repo>/.tmp-<name>-XXXXXX:
every file, then a manifest of exactly the bytes this run wrote), then put in place in one
step under the repository's lock (a flock on the repository folder itself, so that no lock file
is left in it):

- over an existing folder the two are exchanged atomically (renameat2 RENAME_EXCHANGE), and
  the old one is then removed. A path names the old folder or the new one, never a mix of their
  files; a reader that opens several files one after another (a folder has no snapshot) can
  still straddle the exchange, so fusedops_app reads a model folder's files again when the
  folder was exchanged while it read them (app/src/file_access.h, read_consistently): each
  command uses one export's files. Triton reads config.pbtxt when it loads a model and the model
  file when an instance starts, each by path: a load that overlaps an export may pair one
  export's config with the other's model (the same model at other sizes, say) — with explicit
  model control, load or reload a model after its export has finished;
- two exports of one folder at once each build their own staging folder and take turns at
  the swap: the last one wins, and whichever it is, the folder holds one run's files and that
  run's manifest, never a folder fusedops_app refuses;
- an export that stops at any point (an error, a kill) leaves the previous folder as it was;
  what it leaves behind is a .tmp-* staging folder, which the next export removes once no
  live process holds it (each writer holds a flock on its own staging folder, which ends when
  the process does, however it ends);
- the app skips hidden folders when it scans a repository, so a staging folder is never
  taken for a model.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

MANIFEST_FILE_NAME = "fusedops_manifest.json"
MANIFEST_FORMAT = 1
STAGING_PREFIX = ".tmp-"


def open_folder(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


@contextlib.contextmanager
def repository_lock(repo: Path):
    """An exclusive lock on the repository, held while staging folders are made, removed or
    swapped into place (moments: a folder's files are written without it)."""
    fd = open_folder(repo)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def writer_is_gone(staging: Path) -> bool:
    """Whether no live process holds staging's flock (its writer's ends with the writer)."""
    try:
        fd = open_folder(staging)
    except OSError:
        return False  # not a folder we can judge: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def remove_leftovers(repo: Path) -> None:
    """Staging folders of exports that stopped (call with the repository lock held: a staging
    folder is made and locked under it, so none is seen unlocked while its writer lives)."""
    for entry in repo.iterdir():
        if (entry.name.startswith(STAGING_PREFIX) and entry.is_dir() and
                not entry.is_symlink() and writer_is_gone(entry)):
            shutil.rmtree(entry, ignore_errors=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_text(folder: Path, relative_names: list[str]) -> str:
    """fusedops_manifest.json: SHA-256 and size of each file, so that fusedops_app refuses a
    file damaged or changed after export (app/src/manifest.h reads it)."""
    files = {name: {"sha256": sha256_of(folder / name), "bytes": (folder / name).stat().st_size}
             for name in sorted(relative_names)}
    return json.dumps({"format": MANIFEST_FORMAT, "algorithm": "sha256", "files": files},
                      indent=2) + "\n"


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> bool:
    """Swaps two folders in one step (Linux renameat2 RENAME_EXCHANGE, glibc's wrapper);
    False where the system or file system does not offer it."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(error, f"cannot swap {b} into place: {os.strerror(error)}", str(b))


class ModelFolderWriter:
    """Builds one model folder aside and puts it in place:

        with ModelFolderWriter(repo, name) as folder:
            write files under folder.path / ...
            folder.commit(["config.pbtxt", "1/model.pt", ...])   # the manifest lists these

    Leaving the block without commit() (an error) removes the staging folder; the repository
    is as it was."""

    def __init__(self, repo: Path, name: str):
        self.repo = repo
        self.name = name
        self.target = repo / name
        self.path: Path | None = None
        self._writer_lock: int | None = None

    def __enter__(self) -> "ModelFolderWriter":
        if self.target.is_symlink() or (self.target.exists() and not self.target.is_dir()):
            raise FileExistsError(f"{self.target} exists and is not a folder; export replaces "
                                  "only a model folder")
        with repository_lock(self.repo):
            remove_leftovers(self.repo)
            self.path = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{self.name}-",
                                              dir=self.repo))
            self._writer_lock = open_folder(self.path)
            fcntl.flock(self._writer_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # mkdtemp makes it 0700; a model folder is as readable as any folder the user makes.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)
        return self

    def commit(self, relative_names: list[str]) -> Path:
        """Writes the manifest of exactly these files (as this run wrote them) and swaps the
        folder into place; returns its final path."""
        assert self.path is not None
        (self.path / MANIFEST_FILE_NAME).write_text(manifest_text(self.path, relative_names))
        with repository_lock(self.repo):
            # Released under the repository lock: no export can take the folder for a leftover
            # before it is in place.
            self._release_writer_lock()
            if not self.target.exists():
                os.rename(self.path, self.target)
            elif exchange(self.path, self.target):
                shutil.rmtree(self.path)  # the previous folder, now at the staging name
            else:
                # Without an atomic exchange the folder is missing for a moment (a kill then
                # leaves the previous one in .tmp-*-previous, which the next export removes).
                previous = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{self.name}-previous-",
                                                 dir=self.repo))
                os.rename(self.target, previous / "folder")
                os.rename(self.path, self.target)
                shutil.rmtree(previous)
        self.path = None
        return self.target

    def _release_writer_lock(self) -> None:
        if self._writer_lock is not None:
            os.close(self._writer_lock)
            self._writer_lock = None

    def __exit__(self, *exc_info) -> None:
        self._release_writer_lock()
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
