"""``vlmpack verify``: every count re-derived from the shard bytes alone.

Uses the real output and the "sealed" damage helpers of ``test_check.py``: sealed damage also
recomputes every file checksum, marker and total (not the samples' content sha256 recorded at pack
time, which the ``check`` gate compares), so that the recount from the shard bytes (chat template +
tokenizer + the family's media rule on the parts' headers) is shown to find what it must; with
``run_dir=False`` it is the only check of a sample's content.
"""

from __future__ import annotations

from cli_runner import run_cli
from test_check import SHARD, _edit_json, _edit_packs, _read_tar, out, packed  # noqa: F401 - fixtures

from vlmpack.check import check_output
from vlmpack.verify import recount_shard, verify_output


def _recount_problems(out_dir, **kw) -> list[str]:
    return list(verify_output(out_dir, workers=1, **kw)["problems"])


def test_clean_output_verifies_with_and_without_decode(packed, model_dir):  # noqa: F811
    res = verify_output(packed, workers=2)
    assert res["problems"] == [] and res["recounted_shards"] >= 3 and res["samples"] > 200
    assert all(recount_shard(str(p), str(model_dir), decode=True) == [] for p in sorted(packed.glob("*.tar")))
    proc = run_cli(["verify", packed, "--workers", "1"])
    assert proc.returncode == 0 and "verify passed" in proc.stdout, proc.stderr


def test_sealed_text_edit_is_found_by_the_content_sha256_and_the_recount(out):  # noqa: F811
    edited = {}

    def edit(key, obj):  # a few more words in one user turn: the recorded counts stay as they were
        if not edited:
            s = obj["samples"][0]
            part = next(c for m in s["messages"] if m["role"] == "user" for c in m["content"] if c["type"] == "text")
            part["text"] += " and a few more words"
            edited["id"] = s["id"]
        return obj

    _edit_json(out, SHARD, edit)
    # every file checksum is sealed again: the gate sees it by the content sha256 recorded at pack time
    gate = check_output(out, num_workers=0)["problems"]
    assert len(gate) == 1 and "content sha256 differs" in gate[0] and repr(edited["id"]) in gate[0], gate
    problems = _recount_problems(out)
    recount = [p for p in problems if p not in gate]
    assert len(recount) == 1 and "recounted from the shard" in recount[0] and repr(edited["id"]) in recount[0]


def test_sealed_swapped_images_are_found(out):  # noqa: F811
    swapped = {}

    def edit(packs):
        new = []
        for key, parts in packs:
            imgs = [i for i, (p, _) in enumerate(parts) if p.startswith("img")]
            sizes = {len(parts[i][1]) for i in imgs}
            if not swapped and len(imgs) >= 2 and len(sizes) >= 2:
                a, b = imgs[0], next(i for i in imgs if len(parts[i][1]) != len(parts[imgs[0]][1]))
                parts = list(parts)
                parts[a], parts[b] = (parts[a][0], parts[b][1]), (parts[b][0], parts[a][1])
                swapped["key"] = key
            new.append((key, parts))
        return new

    _edit_packs(out, SHARD, edit)
    assert swapped, "no pack with two images of different sizes in this shard"
    problems = _recount_problems(out)
    assert problems and all(swapped["key"] in p for p in problems)
    assert any("pixels but" in p for p in problems)


def test_sealed_wrong_count_without_run_dir(out):  # noqa: F811
    def edit(key, obj):
        if key == _read_tar(out / SHARD)[0][0]:
            obj["samples"][0]["num_tokens"] += 1
            obj["num_tokens"] += 1
        return obj

    _edit_json(out, SHARD, edit)
    res = verify_output(out, workers=1, run_dir=False)  # no manifest to compare with: only the recount sees it
    assert [p for p in res["problems"] if "recounted from the shard" in p], res["problems"]


def test_raw_damage_fails_through_the_gate(out):  # noqa: F811
    (out / (SHARD + ".idx")).unlink()
    path = out / "shard-000002.tar"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    problems = _recount_problems(out)
    assert any(SHARD + ".idx" in p for p in problems) and any("shard-000002.tar" in p for p in problems)


def test_one_character_text_edit(out):  # noqa: F811
    path = out / SHARD
    data = bytearray(path.read_bytes())
    at = data.index(b'"text": "') + len(b'"text": "') if b'"text": "' in data else data.index(b'"text":"') + 8
    data[at] = ord("x") if data[at] != ord("x") else ord("y")  # same length: the tar stays readable
    path.write_bytes(bytes(data))
    problems = _recount_problems(out)
    assert any("sha256" in p and SHARD in p for p in problems), problems


def test_sealed_deleted_sample(out):  # noqa: F811
    gone = {}

    def edit(key, obj):
        if not gone and len(obj["samples"]) > 1 and not obj["samples"][-1]["media"]:
            s = obj["samples"].pop()
            obj["num_tokens"] -= s["num_tokens"]
            gone["id"] = s["id"]
        return obj

    _edit_json(out, SHARD, edit)
    assert gone
    problems = _recount_problems(out)
    assert any(repr(gone["id"]) in p or gone["id"] in p for p in problems), problems


def test_batched_recount_finds_the_one_sample_whose_template_raises(packed, model_dir):  # noqa: F811
    """The recount tokenizes a batch of samples at once; a sample that makes the chat template raise
    (a text part without its text: KeyError) is recounted alone and gets its one problem line,
    while every other sample of the batch is recounted as usual (no line)."""
    from vlmpack.models import load_model
    from vlmpack.packfmt import ShardPacks
    from vlmpack.sinks import sink_of
    from vlmpack.verify import _Recount, _recount_media

    shard = sorted(packed.glob("*.tar"))[0]
    family, sink = load_model(str(model_dir), ""), sink_of(packed)
    problems: list[str] = []
    recount = _Recount(family, problems)
    broken = None
    for pack in list(ShardPacks(str(shard)))[:12]:
        obj, parts = sink.read_pack(pack.parts)
        sample_lines = []
        for s in obj["samples"]:
            if broken is None:
                part = next(c for m in s["messages"] for c in m["content"] if c["type"] == "text")
                del part["text"]
                broken = s["id"]
            lines: list[str] = []
            media_tokens, sizes = _recount_media(family, s, parts, pack.key, f"{shard.name} {pack.key}", lines)
            recount.add(f"{shard.name} {pack.key}", s, media_tokens, sizes, None, lines)
            sample_lines.append(lines)
        recount.end_pack(sample_lines, [])
    recount.flush()
    assert len(problems) == 1 and repr(broken) in problems[0] and "cannot be re-rendered (KeyError" in problems[0], \
        problems
