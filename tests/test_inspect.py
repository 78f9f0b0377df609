"""``vlmpack inspect``: a pack as the model sees it; the label mask covers exactly the assistant turns."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from cli_runner import run_cli
from test_check import packed  # noqa: F401 - the module's real output

from vlmpack.inspection import find_packs, inspect_pack, render_html


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.sections, self.rows, self.spans, self._span = [], [], 0, [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a)
        elif tag == "section":
            self.sections.append(a.get("id"))
        elif tag == "tr" and a.get("class") == "sample":
            self.rows += 1
        elif tag == "span":
            self._span = [a.get("class"), ""]

    def handle_data(self, data):
        if self._span is not None:
            self._span[1] += data

    def handle_endtag(self, tag):
        if tag == "span" and self._span is not None:
            self.spans.append(tuple(self._span))
            self._span = None


def test_labels_are_exactly_the_assistant_turns(packed, model_dir):  # noqa: F811
    found = find_packs(packed, random_n=3, seed=1)
    assert len(found) == 3
    for _, _, parts in found:
        obj = json.loads(parts["json"])
        for s, got in zip(obj["samples"], inspect_pack(parts, str(model_dir))):
            assert got.id == str(s["id"]) and got.num_tokens == got.recorded_tokens == s["num_tokens"]
            want = ["".join(c["text"] for c in m["content"] if c["type"] == "text") + "<|im_end|>"
                    for m in s["messages"] if m["role"] == "assistant"]
            assert [text for kind, text in got.runs if kind == "label"] == want
            assert sum(1 for kind, _ in got.runs if kind == "media") == len(s["media"])


def test_html_page_and_cli(packed, model_dir, tmp_path):  # noqa: F811
    shard, key, parts = find_packs(packed, sample=json.loads(next(iter(
        find_packs(packed, random_n=1, seed=3)))[2]["json"])["samples"][-1]["id"])[0]
    obj = json.loads(parts["json"])
    page = _Page()
    page.feed(render_html([(shard, key, parts, inspect_pack(parts, str(model_dir)))], tmp_path / "p.html")
              .read_text(encoding="utf-8"))
    assert page.sections == [key] and page.rows == len(obj["samples"])
    assert len(page.imgs) == sum(len(s["media"]) for s in obj["samples"])
    assert all(i["src"].startswith("data:image/") for i in page.imgs)
    assert {k for k, _ in page.spans} <= {"label", "context", "media"} and any(k == "label" for k, _ in page.spans)
    proc = run_cli(["inspect", packed, "--pack", key, "--html", tmp_path / "c.html"],
                   env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert key in proc.stdout and all(str(s["id"]) in proc.stdout for s in obj["samples"])
    assert re.search(r"\d+ samples, [\d,]+ tokens", proc.stdout) and (tmp_path / "c.html").is_file()
    proc = run_cli(["inspect", packed, "--pack", "pack999999999"])
    assert proc.returncode == 2 and "no pack 'pack999999999'" in proc.stderr


def test_trained_tokens_marked_without_colour(packed, model_dir):  # noqa: F811
    """Printed to a file (or with ``--plain``) every trained run is between ``[[`` and ``]]``, no
    colour codes: the label mask survives ``vlmpack inspect ... > file``."""
    import io

    from rich.console import Console

    from vlmpack.inspection import marked, render_terminal

    assert marked("\nHello!<|im_end|>\n") == "\n[[Hello!<|im_end|>]]\n" and marked(" ") == "[[ ]]"
    shard, key, parts = find_packs(packed)[0]
    samples = inspect_pack(parts, str(model_dir))
    buf = io.StringIO()
    render_terminal(shard, key, samples, console=Console(file=buf, width=200), plain=True)
    text = buf.getvalue()
    labels = [c.strip() for s in samples for k, c in s.runs if k == "label" and c.strip()]
    assert labels and all(f"[[{c}]]" in text for c in labels[:20]) and "\x1b[" not in text
    proc = run_cli(["inspect", packed, "--pack", key], env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and "[[" in proc.stdout and "]]" in proc.stdout and "\x1b[" not in proc.stdout
    assert "encode packs" not in proc.stderr  # no progress bar where stderr is no terminal
