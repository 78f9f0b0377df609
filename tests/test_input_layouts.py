"""The layouts and containers users' data already sits in (issue 20).

The Hugging Face / TRL chat-template layout (item 1): ``messages`` whose content parts are
``{"type": "image"}`` placeholders matched in order with a top-level ``images`` list (paths, or the
``datasets`` ``Image`` struct), and parts that carry their media (``image`` / ``path`` / ``url`` /
``base64``, the keys transformers' chat templates load).

Proof on real data: the first demo records written in this layout as JSONL (paths), as Parquet and as a
``save_to_disk`` directory (``Sequence(Image())``, the image bytes embedded as on the Hub) pack with the
same ``num_tokens`` and the same media bytes per sample id as the demo's own records, with input =
packed + rejected.

The whole-file containers (item 4): the same records as one JSON array, a CSV table (JSON cells) and
a YAML list pack like the JSONL lines; files that are none of these stop with one line, bad rows are
rejected with a reason."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml
from test_models_qwen2_5_omni import omni_dir  # noqa: F401 - the offline Qwen2.5-Omni directory

from vlmpack.config import load_config
from vlmpack.energon.load import iter_energon_packs
from vlmpack.errors import RecordError
from vlmpack.layouts import to_canonical
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs
from vlmpack.verify import verify_output

N_LINES = 400
SEQ_LEN = 4096
_ROLE = {"human": "user", "gpt": "assistant", "system": "system"}


def _trl(conversation: list[dict]) -> list[dict]:
    """LLaVA turns as HF / TRL messages: each ``<image>`` a ``{"type": "image"}`` part, in order."""
    return [{"role": _ROLE[t["from"]],
             "content": [{"type": "image"} if piece == "<image>" else {"type": "text", "text": piece}
                         for piece in re.split(r"(<image>)", t["value"]) if piece]} for t in conversation]


def test_placeholder_parts_take_the_images_in_order():
    explicit = {"messages": [{"role": "user", "content": [{"type": "image", "image": "a.png"},
                                                          {"type": "text", "text": "and"},
                                                          {"type": "image", "path": "b.png"}]},
                             {"role": "assistant", "content": [{"type": "text", "text": "two"}]}]}
    trl = {"images": ["a.png", {"bytes": None, "path": "b.png"}],
           "messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"},
                                                     {"type": "image", "text": None}]},
                        {"role": "assistant", "content": [{"type": "text", "text": "two"}]}]}
    assert to_canonical(trl) == to_canonical(explicit)
    data = base64.b64encode(b"\x89PNG...").decode()
    inline = to_canonical({"images": [{"bytes": data, "path": "ignored.png"}], "messages": [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "?"}]},
        {"role": "assistant", "content": "!"}]})
    by_part = to_canonical({"messages": [{"role": "user", "content": [{"type": "image", "base64": data},
                                                                       {"type": "text", "text": "?"}]},
                                         {"role": "assistant", "content": "!"}]})
    assert inline == by_part and inline[1] == [("image", f"data:;base64,{data}")]


@pytest.mark.parametrize("images, parts, reason", [
    (["a.png"], 2, "placeholder_mismatch"),  # more placeholders than images
    (["a.png", "b.png"], 1, "placeholder_mismatch"),  # an image no placeholder takes
    ([None], 1, "wrong_type"),  # a null image cell
    ([{"bytes": None, "path": None}], 1, "wrong_type"),
    ([7], 1, "wrong_type"),
])
def test_bad_rows_get_a_reason(images, parts, reason):
    obj = {"images": images, "messages": [{"role": "user", "content": [{"type": "image"}] * parts + [
        {"type": "text", "text": "?"}]}, {"role": "assistant", "content": "!"}]}
    with pytest.raises(RecordError) as e:
        to_canonical(obj)
    assert e.value.reason == reason


@pytest.fixture(scope="module")
def written(real_data, tmp_path_factory):
    """The first :data:`N_LINES` demo records: as given (LLaVA JSONL) and in the HF / TRL layout as
    JSONL (paths), Parquet and a save_to_disk directory (image bytes embedded), a WebDataset shard (``json``
    part naming its image parts); the same records as a JSON array, CSV, YAML and LLaMA-Factory alpaca."""
    import datasets

    d = tmp_path_factory.mktemp("hf")
    lines = (real_data / "real_sft.jsonl").read_text().splitlines()[:N_LINES]
    (d / "llava.jsonl").write_text("\n".join(lines) + "\n")
    recs = [json.loads(x) for x in lines]
    trl = [{"id": r["id"], "messages": _trl(r["conversations"]), "images": r["images"]} for r in recs]
    (d / "trl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trl))
    features = datasets.Features({
        "id": datasets.Value("string"),
        "messages": [{"role": datasets.Value("string"),
                      "content": [{"type": datasets.Value("string"), "text": datasets.Value("string")}]}],
        "images": datasets.Sequence(datasets.Image())})
    ds = datasets.Dataset.from_dict({
        "id": [r["id"] for r in trl],
        "messages": [[{"role": t["role"], "content": [{"type": p["type"], "text": p.get("text")} for p in t["content"]]}
                      for t in r["messages"]] for r in trl],
        "images": [[{"bytes": (real_data / p).read_bytes(), "path": None} for p in r["images"]] for r in trl]},
        features=features)
    ds.to_parquet(str(d / "trl.parquet"))
    ds.save_to_disk(str(d / "trl_disk"))
    with tarfile.open(d / "trl.tar", "w", format=tarfile.USTAR_FORMAT) as tf:  # WebDataset: json + image parts
        for i, r in enumerate(trl):
            parts = {f"{j}.{Path(p).suffix.lstrip('.').lower()}": (real_data / p).read_bytes()
                     for j, p in enumerate(r["images"])}
            obj = {"id": r["id"], "messages": r["messages"], "images": list(parts)}
            for name, data in [("json", json.dumps(obj).encode()), *parts.items()]:
                info = tarfile.TarInfo(f"s{i:06d}.{name}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    (d / "llava.json").write_text(json.dumps(recs, indent=1, ensure_ascii=False))
    with open(d / "llava.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "source", "images", "conversations"])
        w.writeheader()
        w.writerows({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in recs)
    (d / "llava.yaml").write_text(yaml.safe_dump(recs, allow_unicode=True, sort_keys=False))
    alpaca = []  # LLaMA-Factory alpaca: the last turn pair as instruction / output, the others as history
    for r in recs:
        texts = [t["value"] for t in r["conversations"]]
        pairs = [texts[i:i + 2] for i in range(0, len(texts), 2)]
        alpaca.append({"id": r["id"], "instruction": pairs[-1][0], "input": "", "output": pairs[-1][1],
                       "history": pairs[:-1], "images": r["images"]})
    (d / "alpaca.json").write_text(json.dumps(alpaca, ensure_ascii=False))
    return d, len(lines)


def _pack(inputs: list[Path], real_data: Path, model_dir: Path, out: Path) -> tuple[dict, dict]:
    """Pack ``inputs``; returns the report and, per sample id, (num_tokens, sha256 of each media part)."""
    report = run_pack(load_config(input=[str(p) for p in inputs], media_root=str(real_data), model=str(model_dir),
                                  output=str(out), seq_len=SEQ_LEN, workers=1, progress=False))
    got = {}
    for raw in read_packs(out):
        for s in json.loads(raw["json"])["samples"]:
            got[s["id"]] = (s["num_tokens"], [hashlib.sha256(raw[m["part"]]).hexdigest() for m in s["media"]])
    return report, got


@pytest.mark.parametrize("name", ["trl.jsonl", "trl.parquet", "trl_disk", "trl.tar", "llava.json", "llava.csv",
                                  "llava.yaml", "alpaca.json"])
def test_the_layout_packs_like_the_same_samples_in_llava_jsonl(written, name, real_data, model_dir, tmp_path):
    d, n = written
    want_report, want = _pack([d / "llava.jsonl"], real_data, model_dir, tmp_path / "llava")
    src = d / name
    inputs = sorted(src.glob("*.arrow")) if src.is_dir() else [src]
    report, got = _pack(inputs, real_data, model_dir, tmp_path / "trl")
    # input = packed + rejected (+ dropped: longer than L)
    assert report["samples_packed"] + report["rejected"] + report["dropped_overlong"] == n
    assert (report["samples_packed"], report["dropped_overlong"]) == (want_report["samples_packed"],
                                                                     want_report["dropped_overlong"])
    assert report["samples_packed"] > 0.9 * n
    assert got == want
    assert sum(len(m) for _, m in got.values()) > 250  # 289 images, compared byte for byte
    # Energon's own loader yields every packed sample once (input = packed + rejected through it)
    loaded = [s["id"] for pack in iter_energon_packs(tmp_path / "trl", num_workers=0) for s in pack.samples]
    assert sorted(loaded) == sorted(got) and len(loaded) == report["samples_packed"]
    if name in ("trl.parquet", "alpaca.json"):  # one table and one document input: recounted from the shards
        assert verify_output(tmp_path / "trl", workers=1)["problems"] == []


def test_the_readme_layout_examples_convert():
    """Each example record of the layout table (docs/input-layouts.md, and the README's copy of it)
    converts to the same canonical sample."""
    root = Path(__file__).resolve().parents[1]
    samples = set()
    for doc in (root / "docs" / "input-layouts.md", root / "README.md"):
        readme = doc.read_text(encoding="utf-8")
        rows = re.findall(r"^\| `(\w+)`[^|]*\| `(\{.*?\})`", readme, flags=re.M)
        assert [name for name, _ in rows] == ["llava", "messages", "messages", "alpaca", "prompts", "messages"], doc
        samples |= {json.dumps(to_canonical(json.loads(example), schema=name)) for name, example in rows}
    assert len(samples) == 1  # one sample: <image> "What?" -> "A cat."


def test_two_conversation_keys_are_rejected_unless_a_schema_is_forced():
    """A record with both ``messages`` and ``conversations`` (packed silently from one before) is
    rejected ``two_conversations``; ``--schema`` says which one is meant."""
    obj = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
           "conversations": [{"from": "human", "value": "c"}, {"from": "gpt", "value": "d"}]}
    with pytest.raises(RecordError) as e:
        to_canonical(dict(obj))
    assert e.value.reason == "two_conversations" and "--schema" in str(e.value)
    assert to_canonical(dict(obj), schema="llava")[0][0]["content"] == [{"type": "text", "text": "c"}]


@pytest.mark.parametrize("name, data", [
    ("a.json", b'[{"messages": []}] extra'),
    ("b.json", b'[{"messages": []},]'),
    ("c.yaml", b"messages: []\n"),
    ("d.yaml", b"- !!python/object/apply:os.system ['touch /tmp/vlmpack-yaml-ran']\n"),
    ("e.csv", b""),
])
def test_a_file_that_is_no_list_of_records_is_one_line(name, data, tmp_path):
    from vlmpack.errors import InputError
    from vlmpack.sources import check_input

    (tmp_path / name).write_bytes(data)
    with pytest.raises(InputError) as e:
        check_input(str(tmp_path / name))
    assert "\n" not in str(e.value) and name in str(e.value)
    assert not Path("/tmp/vlmpack-yaml-ran").exists()  # a YAML tag never runs anything


def test_bad_rows_of_a_document_are_rejected_with_a_reason(tmp_path):
    from vlmpack.sources import get_source, resolve_format

    good = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    (tmp_path / "r.json").write_text(json.dumps([good, 7, {"messages": "x"}]))
    (tmp_path / "r.csv").write_text('id,messages\n1,"[{""role"": ""user"", ""content"": ""a""}, '
                                    '{""role"": ""assistant"", ""content"": ""b""}]"\n2,[not json\n')
    for name, want in (("r.json", [None, "not_an_object", "wrong_type"]), ("r.csv", [None, "invalid_json"])):
        path = str(tmp_path / name)
        got = [getattr(r, "reason", None) for r in get_source(resolve_format(path)).read(path, 0, -1, 1)]
        assert got == want, name


def test_alpaca_rows_are_llama_factory_turns():
    """LLaMA-Factory's AlpacaDatasetConverter: history pairs, then instruction and input joined with a
    newline, system first; a row without a string output (preference / pre-training) is no SFT sample."""
    got = to_canonical({"system": "Be brief.", "instruction": "<image>Name it", "input": "in one word",
                        "output": "Cat", "history": [["Hi", "Hello"]], "images": ["a.png"]})
    assert got[0] == [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                      {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                      {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                      {"role": "user", "content": [{"type": "image", "index": 0},
                                                   {"type": "text", "text": "Name it\nin one word"}]},
                      {"role": "assistant", "content": [{"type": "text", "text": "Cat"}]}]
    for bad in ({"instruction": "q", "output": None, "chosen": "a", "rejected": "b"},
                {"instruction": "q", "output": "a", "history": [["only one"]]}):
        with pytest.raises(RecordError) as e:
            to_canonical(bad)
        assert e.value.reason == "wrong_type"


def test_a_sharegpt_system_column_is_the_system_turn_unless_the_turns_have_one():
    turns = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    got = to_canonical({"system": "S", "conversations": turns})[0]
    assert got[0] == {"role": "system", "content": [{"type": "text", "text": "S"}]} and len(got) == 3
    own = to_canonical({"system": "S", "conversations": [{"from": "system", "value": "T"}, *turns]})[0]
    assert own[0]["content"] == [{"type": "text", "text": "T"}] and len(own) == 3


def _registry(d: Path, entries: dict) -> Path:
    path = d / "reg" / "dataset_info.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(entries))
    return path


_REG = {"demo_sharegpt": {"file_name": "../llava.json", "formatting": "sharegpt",
                          "columns": {"messages": "conversations", "images": "images"}},
        "demo_alpaca": {"file_name": "../alpaca.json",
                        "columns": {"prompt": "instruction", "query": "input", "response": "output",
                                    "history": "history", "images": "images"}}}


def test_a_llama_factory_registry_packs_its_datasets(written, real_data, model_dir, tmp_path):
    """``--input dataset_info.json`` packs the datasets it names (``--dataset`` picks some): the alpaca
    entry packs like the LLaVA records; all entries: both files read, each record once."""
    d, n = written
    reg = _registry(d, _REG)
    _, want = _pack([d / "llava.jsonl"], real_data, model_dir, tmp_path / "llava")
    report = run_pack(load_config(input=[str(reg)], dataset=["demo_alpaca"], media_root=str(real_data),
                                  model=str(model_dir), output=str(tmp_path / "one"), seq_len=SEQ_LEN, workers=1,
                                  progress=False))
    got = {s["id"]: (s["num_tokens"], [hashlib.sha256(raw[m["part"]]).hexdigest() for m in s["media"]])
           for raw in read_packs(tmp_path / "one") for s in json.loads(raw["json"])["samples"]}
    assert got == want and report["records_read"] == n
    both = load_config(input=[str(reg)], media_root=str(real_data), model=str(model_dir), output=str(tmp_path / "b"),
                       seq_len=SEQ_LEN)
    assert [Path(p).name for p in both.input] == ["llava.json", "alpaca.json"]


def test_custom_columns_and_tags_are_mapped_to_the_layouts_names(written, real_data, model_dir, tmp_path):
    """A registry whose sharegpt entry names its own turn key, role / content keys and role values
    (``dialog`` of ``speaker`` / ``text`` with ``Q`` / ``A``) and whose alpaca entry names its own
    columns packs like the LLaVA records, one output per mapping; two entries that map differently
    are one line."""
    d, n = written
    recs = json.loads((d / "llava.json").read_text())
    who = {"human": "Q", "gpt": "A", "system": "S"}
    custom = [{"id": r["id"], "pics": r["images"], "dialog": [{"speaker": who[t["from"]], "text": t["value"]}
                                                              for t in r["conversations"]]} for r in recs]
    (d / "custom_sharegpt.json").write_text(json.dumps(custom))
    alpaca = json.loads((d / "alpaca.json").read_text())
    renamed = {"instruction": "question", "input": "context", "output": "answer", "images": "pictures"}
    (d / "custom_alpaca.json").write_text(json.dumps([{renamed.get(k, k): v for k, v in r.items()} for r in alpaca]))
    reg = _registry(d, {
        "sharegpt": {"file_name": "../custom_sharegpt.json", "formatting": "sharegpt",
                     "columns": {"messages": "dialog", "images": "pics"},
                     "tags": {"role_tag": "speaker", "content_tag": "text", "user_tag": "Q", "assistant_tag": "A",
                              "system_tag": "S"}},
        "alpaca": {"file_name": "../custom_alpaca.json",
                   "columns": {"prompt": "question", "query": "context", "response": "answer", "images": "pictures"}}})
    _, want = _pack([d / "llava.jsonl"], real_data, model_dir, tmp_path / "llava")
    for name in ("sharegpt", "alpaca"):
        report = run_pack(load_config(input=[str(reg)], dataset=[name], media_root=str(real_data),
                                      model=str(model_dir), output=str(tmp_path / name), seq_len=SEQ_LEN, workers=1,
                                      progress=False))
        got = {s["id"]: (s["num_tokens"], [hashlib.sha256(raw[m["part"]]).hexdigest() for m in s["media"]])
               for raw in read_packs(tmp_path / name) for s in json.loads(raw["json"])["samples"]}
        assert got == want and report["records_read"] == n, name
    from vlmpack.errors import ConfigError

    with pytest.raises(ConfigError, match="name their columns or tags differently") as e:
        load_config(input=[str(reg)], media_root=str(real_data), model=str(model_dir), output=str(tmp_path / "x"))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("entry, words", [
    ({"hf_hub_url": "HuggingFaceH4/llava-instruct-mix-vsft"}, "hf_hub_url"),
    ({"file_name": "../llava.json", "ranking": True}, "preference"),
    ({"file_name": "../llava.json", "formatting": "sharegpt", "columns": {"chosen": "c"}}, "columns.chosen"),
    ({"file_name": "../llava.json", "formatting": "sharegpt", "columns": {"kto_tag": "tag"}}, "columns.kto_tag"),
    ({"file_name": "../alpaca.json", "tags": {"role_tag": "speaker"}}, "tags belong to sharegpt"),
    ({"file_name": "../nowhere.json"}, "nowhere.json"),
])
def test_a_registry_entry_vlmpack_does_not_read_is_one_line(written, entry, words, real_data, model_dir):
    from vlmpack.errors import ConfigError

    reg = _registry(written[0], {"x": entry})
    with pytest.raises(ConfigError) as e:
        load_config(input=[str(reg)], media_root=str(real_data), model=str(model_dir), output="/tmp/unused-out")
    assert "dataset 'x'" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="no dataset 'y'"):
        load_config(input=[str(_registry(written[0], _REG))], dataset=["y"], media_root=str(real_data),
                    model=str(model_dir), output="/tmp/unused-out")


def test_a_record_map_rewrites_once_and_refuses_two_keys_for_one_column():
    from vlmpack.layouts.mapping import apply_map, record_map

    spec = record_map("sharegpt", {"messages": "dialog"}, {"role_tag": "speaker", "content_tag": "text",
                                                          "user_tag": "Q", "assistant_tag": "A"})
    obj = {"dialog": [{"speaker": "Q", "text": "<image>What?"}, {"speaker": "A", "text": "A cat."}], "images": ["a"]}
    once = apply_map(dict(obj), spec)
    assert once == {"conversations": [{"from": "human", "value": "<image>What?"}, {"from": "gpt", "value": "A cat."}],
                    "images": ["a"]}
    assert apply_map(json.loads(json.dumps(once)), spec) == once  # idempotent
    assert to_canonical(dict(obj), record_map=spec) == to_canonical(
        {"conversations": once["conversations"], "images": ["a"]})
    assert record_map("sharegpt", {"messages": "conversations"}, {"role_tag": "from"}) is None  # defaults: nothing
    with pytest.raises(RecordError) as e:
        apply_map({"dialog": [], "conversations": []}, spec)
    assert e.value.reason == "wrong_type"
    with pytest.raises(ValueError, match="columns.chosen"):
        record_map("sharegpt", {"chosen": "c"}, {})


def test_a_registry_audios_column_is_the_records_audio(tmp_path, real_data, omni_dir):  # noqa: F811
    """LLaMA-Factory's ``audios`` column (``DatasetAttr.audios``, ``<audio>`` placeholders: its
    ``data/README.md``, "Multimodal Audio Dataset") named in ``columns`` of a sharegpt entry (with its
    own turn key and tags) and of an alpaca entry: each record reads to the same canonical sample,
    audio items in order, as the same record under the default names (``audios``, the ``messages``
    of LLaMA-Factory's ``mllm_audio_demo.json``), and the sharegpt dataset packs for Qwen2.5-Omni,
    every record with its audio files as members, in order."""
    from cache_dir import CACHE
    from conftest import cache_lock
    from demo_data.audio_corpus import build_audio_corpus
    from test_sources_wds import _samples

    from vlmpack.sources import detect_format, get_source

    with cache_lock():
        files = {p.name: p for p in build_audio_corpus(CACHE / "audio_corpus", real_data)}
    (tmp_path / "audio").mkdir()
    for name in ("word.mp3", "word_11k.wav", "bell.oga"):
        (tmp_path / "audio" / name).write_bytes(files[name].read_bytes())
    turns = [("<audio>What is said?", "A word.", ["audio/word.mp3"]),
             ("First <audio>, then <audio>: the same word?", "Yes.", ["audio/word_11k.wav", "audio/word.mp3"]),
             ("Which sound is this? <audio>", "A bell.", ["audio/bell.oga"])]
    default = [{"id": f"r{i}", "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                "audios": au} for i, (q, a, au) in enumerate(turns)]
    (tmp_path / "default.jsonl").write_text("".join(json.dumps(r) + "\n" for r in default))
    (tmp_path / "sharegpt.json").write_text(json.dumps([
        {"id": f"r{i}", "dialog": [{"speaker": "Q", "text": q}, {"speaker": "A", "text": a}], "sounds": au}
        for i, (q, a, au) in enumerate(turns)]))
    (tmp_path / "alpaca.json").write_text(json.dumps([{"id": f"r{i}", "question": q, "answer": a, "clips": au}
                                                      for i, (q, a, au) in enumerate(turns)]))
    reg = tmp_path / "dataset_info.json"
    reg.write_text(json.dumps({
        "sg": {"file_name": "sharegpt.json", "formatting": "sharegpt", "columns": {"messages": "dialog",
                                                                                   "audios": "sounds"},
               "tags": {"role_tag": "speaker", "content_tag": "text", "user_tag": "Q", "assistant_tag": "A"}},
        "alp": {"file_name": "alpaca.json", "columns": {"prompt": "question", "response": "answer",
                                                        "audios": "clips"}}}))

    def read(path: Path, record_map: str | None = None) -> list:
        src = get_source(detect_format(str(path)))
        return [(s.id, s.messages, [(m.kind, m.path) for m in s.media])
                for s in src.read(str(path), 0, -1, 1, media_root=str(tmp_path), record_map=record_map)]

    want = read(tmp_path / "default.jsonl")
    assert [[k for k, _ in media] for _, _, media in want] == [["audio"], ["audio", "audio"], ["audio"]]
    for name in ("sg", "alp"):
        cfg = load_config(input=[str(reg)], dataset=[name], media_root=str(tmp_path), model=str(omni_dir),
                          output=str(tmp_path / name), seq_len=SEQ_LEN, workers=1, progress=False)
        assert cfg.record_map is not None and "audios" in json.loads(cfg.record_map)["columns"], name
        assert read(Path(cfg.input[0]), cfg.record_map) == want, name
    report = run_pack(load_config(input=[str(reg)], dataset=["sg"], media_root=str(tmp_path), model=str(omni_dir),
                                  output=str(tmp_path / "sg"), seq_len=SEQ_LEN, workers=1, progress=False))
    assert report["rejected"] == 0 and report["samples_by_kind"]["audio"] == len(turns)
    assert report["media_tokens_by_kind"]["audio"] > 0
    got = _samples(tmp_path / "sg")
    assert {i: media for i, (_, media) in got.items()} == {
        r["id"]: [(tmp_path / a).read_bytes() for a in r["audios"]] for r in default}
