"""Data folders of the embedded PostgreSQL server: where they live, checks, initdb options."""

from __future__ import annotations

import os
from pathlib import Path

from .._errors import EmbeddedServerError
from .account import Account, check_reachable, data_fix, hand_over, unreachable_folder

# Persistent places for root, whose home the server account usually cannot enter.
FALLBACK_DATA_BASES = (Path("/var/lib/aiopgq"), Path("/tmp/aiopgq-data"))
_SOCKET_PATH_MAX = 107  # sun_path is 108 bytes on Linux, including the NUL


def default_data_dir(major: int) -> Path:
    """The persistent data folder for a PostgreSQL major version: one per major.

    default_data_dir(18)  # PosixPath('/home/me/.local/share/aiopgq/pg18')
    """
    xdg = os.environ.get("XDG_DATA_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / "aiopgq" / f"pg{major}"


def reachable_default_data_dir(major: int, account: Account) -> tuple[Path, Path | None]:
    """`default_data_dir`, or a fallback when we are root and the account cannot reach it.

    Returns (data folder, the unreachable default it replaces or None). A fallback base that
    exists must be a folder only we can change: another user must not prepare it for root.
    """
    default = default_data_dir(major)
    if not account.switch or unreachable_folder(default.parent, account) is None:
        return default, None
    for base in FALLBACK_DATA_BASES:
        try:
            info = base.lstat()
        except FileNotFoundError:
            pass
        else:
            if info.st_uid != os.geteuid() or info.st_mode & 0o022 or base.is_symlink():
                continue
        if unreachable_folder(base, account) is None:
            return base / f"pg{major}", default
    raise EmbeddedServerError(
        f"the PostgreSQL server runs as {account.name!r}, which cannot reach the default data "
        f"folder {default} nor {' or '.join(str(b) for b in FALLBACK_DATA_BASES)}: set "
        "XDG_DATA_HOME to a folder that account can enter"
    )


def prepare_persistent(data_dir: Path, major: int, account: Account) -> bool:
    """Check or create the persistent data folder; True when it needs initdb."""
    fix = data_fix(account)
    check_reachable(data_dir.parent, account, f"data folder {data_dir}", fix)
    try:
        if (data_dir / "PG_VERSION").is_file():
            _check_existing(data_dir, major, account)
            return False
        if data_dir.exists() and any(data_dir.iterdir()):
            raise EmbeddedServerError(
                f"data folder {data_dir} is not empty and has no PG_VERSION, so it is not a "
                "PostgreSQL data folder: pass an empty or new folder"
            )
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        # Again: parents we just made follow the umask.
        check_reachable(data_dir.parent, account, f"data folder {data_dir}", fix)
        data_dir.mkdir(mode=0o700, exist_ok=True)
        hand_over(data_dir, account)
    except OSError as exc:
        raise EmbeddedServerError(f"cannot use data folder {data_dir} ({exc}): {fix}") from exc
    return True


def _check_existing(data_dir: Path, major: int, account: Account) -> None:
    found = (data_dir / "PG_VERSION").read_text().strip()
    if found != str(major):
        raise EmbeddedServerError(
            f"data folder {data_dir} holds PostgreSQL {found} data but the binaries are "
            f"PostgreSQL {major}: use another data folder (the default is one per major, "
            f"{default_data_dir(major)}) or set PG_BIN_DIR to PostgreSQL {found} binaries"
        )
    owner = data_dir.stat().st_uid
    if owner != account.uid:
        fix = "set AIOPGQ_PG_USER to its owner" if account.switch else "run as its owner"
        raise EmbeddedServerError(
            f"data folder {data_dir} belongs to uid {owner} but the server runs as "
            f"{account.name!r} (uid {account.uid}): {fix}"
        )


def initdb_args(major: int, durable: bool) -> list[str]:
    # Trust on the Unix socket, which only the server account and root can open (0700). TCP
    # asks for a password no role has: listening there (settings) needs an hba_file of one's own.
    auth = ["--auth-local=trust", "--auth-host=scram-sha-256"]
    args = ["-U", "postgres", *auth, "-E", "UTF8", "--locale=C"]
    if not durable:
        args.append("--no-sync")  # throwaway data: nothing to lose
    if major >= 14:
        args.append("--no-instructions")
    return args


def listen_settings(socket_dir: Path) -> dict[str, str]:
    """No TCP: a Unix socket another local account cannot open (folder and socket 0700)."""
    quoted = '"' + str(socket_dir).replace('"', '""') + '"'  # a list setting: commas stay
    return {
        "listen_addresses": "",
        "unix_socket_directories": quoted,
        "unix_socket_permissions": "0700",
    }


def persistent_socket_dir(data_dir: Path, run_dir: Path) -> Path:
    """The data folder (0700, the server account's), so the socket and the DSN keep their
    path across restarts; the run folder when the data folder's path is too long for one."""
    fits = len(str(data_dir / ".s.PGSQL.65535.lock")) <= _SOCKET_PATH_MAX
    return data_dir if fits else run_dir


def fallback_note(data_dir: Path, replaced: Path) -> str:
    """Why the data lives in `data_dir` and not in the default `replaced` (we are root)."""
    return (
        f"PostgreSQL runs as an unprivileged account, which cannot enter {replaced}: "
        f"the data lives in {data_dir} instead"
    )
