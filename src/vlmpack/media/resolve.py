"""Media references of records: lexical resolution (:func:`resolve_ref`) and the media-root rule
with symlinks followed (:func:`check_real_path`).

- :func:`resolve_ref` turns the reference written in a record (``"images/a.png"``,
  ``"file:///data/a.png"``, ``"/abs/a.png"``, ``data:`` / ``lmdb://`` references) into an
  absolute path, *lexically* (``os.path.normpath`` of the join; no file system access, used at
  parse time by the readers and sources).
- :func:`check_real_path`: at validation time (:func:`vlmpack.media.probe.probe_media`), the
  ``os.path.realpath`` of the file must lie inside the media root's realpath.

Both raise :class:`MediaError` (``reason`` is a code of :data:`vlmpack.records.REASONS`).
"""

from __future__ import annotations

import os
import re

from vlmpack.errors import MediaError
from vlmpack.media.ref import DATA, LMDB, display_ref, lmdb_ref, parse_ref

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_DIRS: dict[str, str] = {}
_DIRS_MAX = 1 << 18


def resolve_ref(ref: object, media_root: str, *, allow_absolute_media: bool = False,
                lmdb_envs: dict[str, str] | None = None) -> str:
    """Resolve a media reference of a record to an absolute path, lexically.

    ``ref``: a non-empty ``str``, relative to ``media_root`` or absolute, optionally prefixed by
    ``file://``. Returns ``os.path.normpath(os.path.join(abspath(media_root), ref))``; a base64
    ``data:`` URI (inline bytes, :mod:`vlmpack.media.ref`) is returned as it is.
    Raises :class:`MediaError` with ``wrong_type`` (not a non-empty string / NUL byte),
    ``media_unsupported`` (``http(s)://`` or any other URL scheme, a ``data:`` URI that is not
    base64: only local and inline bytes are read), ``media_undecodable`` (invalid base64)
    or ``media_outside_root`` (the path lands outside ``media_root`` and
    ``allow_absolute_media`` is false; ``..`` is resolved lexically, symlinks are not followed
    here: :func:`check_real_path` applies the same rule to the realpath at validation time).
    ``lmdb://NAME/KEY`` names the value of ``KEY`` (UTF-8) in the LMDB store ``NAME`` of
    ``lmdb_envs`` (name -> env path, ``--media-lmdb``) and resolves to the
    :func:`vlmpack.media.ref.lmdb_ref` of it (no file system access; a missing key is found by
    :func:`vlmpack.media.probe.probe_media`: ``media_missing``); an unknown ``NAME`` is
    ``media_unsupported``. ``<lmdb_dir>::<key>`` (NeMo Automodel's form, :func:`_lmdb_pair`) names
    the value of ``key`` in the LMDB directory ``lmdb_dir`` (relative to ``media_root`` or absolute,
    under the same root rule; ``media_missing`` when that directory holds no ``data.mdb``: looking
    for it, and its realpath, is the only file system access here).
    """
    if not isinstance(ref, str) or not ref:
        raise MediaError("wrong_type", f"media reference must be a non-empty string, got {_short(ref)}")
    if "\x00" in ref:
        raise MediaError("wrong_type", f"media reference contains a NUL byte: {_short(ref)}")
    path = ref
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith(LMDB):
        return _resolve_lmdb(ref, lmdb_envs or {})
    elif path[:5].lower() == DATA:
        try:
            parse_ref(DATA + path[5:])
        except MediaError as e:
            raise MediaError(e.reason, f"{e.detail}: {display_ref(ref)[:80]}") from None
        return DATA + path[5:]
    elif "::" in path and "://" not in path:
        return _lmdb_pair(path, os.path.normpath(os.path.abspath(media_root)), ref, allow_absolute_media)
    elif _SCHEME.match(path) and not _is_windows_drive(path):
        kind = "remote media" if path.lower().startswith(("http://", "https://")) else "URL media"
        raise MediaError("media_unsupported", f"{kind} is not supported (download it first): {_short(ref)}")
    if not path:
        raise MediaError("wrong_type", f"empty media path in {_short(ref)}")
    root = os.path.normpath(os.path.abspath(media_root))
    full = os.path.normpath(os.path.join(root, path))
    if not allow_absolute_media and not _inside(full, root):
        raise MediaError(
            "media_outside_root",
            f"media path {_short(ref)} resolves to {full}, outside media root {root} "
            "(pass allow_absolute_media to accept it)",
        )
    return full


def _lmdb_pair(path: str, root: str, ref: str, allow_absolute_media: bool) -> str:
    """The :func:`vlmpack.media.ref.lmdb_ref` of NeMo Automodel's ``<lmdb_dir>::<key>`` reference
    (``_resolve_lmdb_image`` of ``nemo_automodel/components/datasets/vlm/utils.py``: split at the
    first ``::``, ``lmdb_dir`` an environment directory (``data.mdb`` inside), the key's UTF-8
    bytes). The directory must lie inside ``root``, lexically and with symlinks followed, unless
    ``allow_absolute_media`` (``media_outside_root``); ``media_missing`` when it holds no
    ``data.mdb`` or the key is empty."""
    env_part, key = path.split("::", 1)
    env = os.path.normpath(os.path.join(root, env_part))
    if not allow_absolute_media and not _inside(env, root):
        raise MediaError("media_outside_root", f"LMDB store of {_short(ref)} resolves to {env}, outside media "
                         f"root {root} (pass allow_absolute_media to accept it)")
    if not env_part or not os.path.isfile(os.path.join(env, "data.mdb")):
        raise MediaError("media_missing", f"no LMDB store (a folder with data.mdb) at {env} for {_short(ref)}")
    if not allow_absolute_media:
        check_real_path(os.path.join(env, "data.mdb"), root)
    if not key:
        raise MediaError("media_missing", f"LMDB reference {_short(ref)} names no key; write <lmdb_dir>::<key>")
    return lmdb_ref(env, key.encode("utf-8", "surrogatepass"))


def _resolve_lmdb(ref: str, envs: dict[str, str]) -> str:
    name, _, key = ref[len(LMDB):].partition("/")
    if name not in envs:
        known = ", ".join(sorted(envs)) or "none"
        raise MediaError("media_unsupported", f"LMDB store {name!r} of {_short(ref)} is not configured "
                         f"(configured: {known}); pass --media-lmdb {name or 'NAME'}=PATH")
    if not key:
        raise MediaError("media_missing", f"LMDB reference {_short(ref)} names no key; write lmdb://NAME/KEY")
    return lmdb_ref(os.path.abspath(envs[name]), key.encode("utf-8", "surrogatepass"))


def check_real_path(path: str, media_root: str, kind: str = "image") -> None:
    """The media-root rule with symlinks followed: ``os.path.realpath(path)`` must lie inside
    ``os.path.realpath(media_root)`` (directory realpaths cached per process, :func:`clear_realpaths`).
    Raises :class:`MediaError` ``media_outside_root``, or ``media_missing`` when the path cannot be
    resolved; ``kind`` names the media in the detail."""
    try:
        real, root = _realpath(path), _real_dir(media_root)
    except (OSError, ValueError) as e:  # a NUL byte, an unreadable directory
        raise MediaError("media_missing", f"{kind} path cannot be resolved: {path} ({_oneline(e)})") from None
    if not _inside(real, root):
        raise MediaError(
            "media_outside_root",
            f"{kind} path {path} resolves (symlinks followed) to {real}, outside media root {root} "
            "(pass --allow-absolute-media / allow_absolute_media to accept it)",
        )


def _realpath(path: str) -> str:
    """``os.path.realpath(path)`` with the directory part cached (``realpath`` lstat()s every
    component: ~35 us a call, more than a cached probe)."""
    head, tail = os.path.split(path)
    full = os.path.join(_real_dir(head), tail)
    return os.path.realpath(full) if os.path.islink(full) else full


def _real_dir(path: str) -> str:
    """``os.path.realpath`` of a directory, cached per process (a directory symlink changed during a
    run is not seen: the written bytes are read later anyway; :func:`clear_realpaths` forgets)."""
    hit = _DIRS.get(path)
    if hit is None:
        if len(_DIRS) >= _DIRS_MAX:
            _DIRS.clear()
        hit = _DIRS[path] = os.path.realpath(path)
    return hit

def clear_realpaths() -> None:
    """Forget the cached directory realpaths of this process (e.g. after symlinks changed)."""
    _DIRS.clear()


def _inside(path: str, root: str) -> bool:
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path == root or path.startswith(prefix)


def _is_windows_drive(path: str) -> bool:
    return os.name == "nt" and len(path) > 1 and path[1] == ":"


def _short(value: object, limit: int = 120) -> str:
    text = _oneline(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _oneline(value: object) -> str:
    return " ".join(str(value).split())
