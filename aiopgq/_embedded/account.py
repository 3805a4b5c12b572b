"""Who runs the embedded PostgreSQL server, and which folders it can reach.

PostgreSQL refuses to run as root. When we are root, initdb and postgres run as an
unprivileged account (``AIOPGQ_PG_USER``, else ``postgres``, else ``nobody``) that must be able
to enter every folder on the way to the binaries, the data folder and the socket folder. Root
passes every ``os.access`` check, so reachability is computed from the permission bits for that
account. We chown only the folders we create for the server and never chmod existing ones.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import EmbeddedServerError

_SOCKET_PATH_MAX = 107  # sun_path is 108 bytes on Linux, including the NUL
_SHORT_TEMP_BASE = 40  # keep socket paths far below that limit


@dataclass(frozen=True)
class Account:
    """The account initdb and postgres run as; `switch` when we are root and must drop to it."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    switch: bool

    def popen_kwargs(self) -> dict[str, Any]:
        if not self.switch:
            return {}
        # extra_groups too: otherwise the child keeps root's supplementary groups.
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def as_config(self) -> dict[str, Any] | None:
        return {"uid": self.uid, "gid": self.gid, "groups": self.groups} if self.switch else None

    def permission_bits(self, info: os.stat_result) -> int:
        """The rwx bits of info that apply to this account (as 0o7), like the kernel does."""
        if info.st_uid == self.uid:
            return (info.st_mode >> 6) & 0o7
        if info.st_gid in self.groups:
            return (info.st_mode >> 3) & 0o7
        return info.st_mode & 0o7


def server_account() -> Account:
    """Ourselves when not root; else the unprivileged account the server must run as."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return Account(entry.pw_name, entry.pw_uid, os.getegid(), tuple(os.getgroups()), False)
    chosen = os.environ.get("AIOPGQ_PG_USER")
    name = chosen or ("postgres" if _account_exists("postgres") else "nobody")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise EmbeddedServerError(
            f"AIOPGQ_PG_USER={name}: no such account; create it (useradd --system {name}) "
            "or set AIOPGQ_PG_USER to an existing unprivileged account"
        ) from None
    if entry.pw_uid == 0:
        raise EmbeddedServerError(
            f"PostgreSQL refuses to run as root, and account {name} is uid 0: "
            "set AIOPGQ_PG_USER to an unprivileged account"
        )
    groups = tuple(os.getgrouplist(name, entry.pw_gid))
    return Account(name, entry.pw_uid, entry.pw_gid, groups, True)


def _account_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# -- reachability --------------------------------------------------------------------------


def unreachable_folder(path: Path, account: Account) -> Path | None:
    """The first existing folder from / down to path that account cannot enter, if any."""
    path = path.resolve()
    for folder in (*reversed(path.parents), path):
        try:
            info = folder.stat()
        except FileNotFoundError:
            return None  # we create the rest, reachable
        if not stat.S_ISDIR(info.st_mode):
            return None
        if not can_enter(folder, info, account):
            return folder
    return None


def can_enter(folder: Path, info: os.stat_result, account: Account) -> bool:
    if not account.switch:
        return os.access(folder, os.X_OK)
    return bool(account.permission_bits(info) & 0o1)


def can_use_file(info: os.stat_result, account: Account) -> bool:
    """Account can read the file, and execute it if anyone can (binaries, scripts)."""
    bits = account.permission_bits(info)
    executable = bool(info.st_mode & 0o111)
    return bool(bits & 0o4) and (not executable or bool(bits & 0o1))


def tree_is_usable(roots: Iterable[Path], account: Account) -> bool:
    """Account can reach each root, list and enter every folder below, and use every file.

    A few thousand stat calls for a PostgreSQL install: milliseconds.
    """
    for root in roots:
        if unreachable_folder(root, account) is not None:
            return False
        for folder, _dirs, files in os.walk(root):
            if account.permission_bits(os.stat(folder)) & 0o5 != 0o5:
                return False
            for name in files:
                try:
                    info = os.stat(os.path.join(folder, name))
                except OSError:
                    return False  # a dangling link, say
                if not can_use_file(info, account):
                    return False
    return True


def check_reachable(path: Path, account: Account, what: str, fix: str) -> None:
    """Fail clearly unless account can enter every existing folder above path (and path)."""
    folder = unreachable_folder(path, account)
    if folder is None:
        return
    mode = stat.filemode(folder.stat().st_mode)
    raise EmbeddedServerError(
        f"the PostgreSQL server runs as {account.name!r}, which cannot enter {folder} ({mode}) "
        f"on the way to the {what}: {fix}. aiopgq never changes the permissions of existing "
        "folders."
    )


def data_fix(account: Account) -> str:
    other = " or set AIOPGQ_PG_USER to an account that can enter it" if account.switch else ""
    return f"pick a data folder elsewhere{other}"


# -- temporary folders ---------------------------------------------------------------------


def reachable_temp_base(account: Account) -> Path:
    """A short temporary folder the server account can enter: $TMPDIR when it can, else /tmp.

    As root, TMPDIR often sits in a private folder (/root/tmp, a 0700 ``mktemp -d``); the
    server account cannot enter those, so we fall back to /tmp rather than fail.
    """
    candidates = [Path(tempfile.gettempdir()), Path("/tmp")]
    for base in candidates:
        if len(str(base)) <= _SHORT_TEMP_BASE and unreachable_folder(base, account) is None:
            return base
    tried = " and ".join(dict.fromkeys(str(c) for c in candidates))
    raise EmbeddedServerError(
        f"no temporary folder the PostgreSQL server account {account.name!r} can enter "
        f"(tried {tried}): set TMPDIR to a short folder that account can enter"
    )


def make_run_dir(account: Account) -> Path:
    """A short private folder for the Unix socket (and the throwaway data), owned by account."""
    run_dir = Path(tempfile.mkdtemp(prefix="aiopgq-", dir=reachable_temp_base(account)))
    try:
        if len(str(run_dir / ".s.PGSQL.65535")) > _SOCKET_PATH_MAX:
            raise EmbeddedServerError(f"socket folder {run_dir} is too long: set TMPDIR=/tmp")
        hand_over(run_dir, account)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def hand_over(folder: Path, account: Account) -> None:
    if account.switch:
        os.chown(folder, account.uid, account.gid)
