"""Per-node packing without Ray (``vlmpack pack --num-nodes N --node-rank r``) and the Energon blend
of the nodes' outputs (``vlmpack metadataset``), on the real demo set.

The input is the first 600 records of the demo set in two files (400 + 200 records) plus its broken
records (three input tasks): node 0 of 2 takes tasks 0 and 2, node 1 task 1, so the nodes' weights
differ (about 2:1) and the proportions Energon draws tell them apart. Against a single run of the same
input: every accepted id exactly once across the nodes, the same rejections (reason by locator),
records read = packed + rejected + overlong summed over the nodes; the blend's weights are the
nodes' sample counts and Energon's own loader draws packs from each node in that proportion.
"""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hostile_corpus import one_error_line, run_cli
from typer.testing import CliRunner

from vlmpack.check_blend import check_blend
from vlmpack.cli import app
from vlmpack.config import load_config
from vlmpack.energon.metadataset import blend_problems, iter_blend, read_metadataset
from vlmpack.errors import ConfigError, RunDirError
from vlmpack.pack.nodes import all_ranges, node_ranges, select_tasks
from vlmpack.pack.pipeline import run_pack
from vlmpack.packfmt import read_packs


def _pack_args(inputs: list[Path], real_data: Path, model_dir: Path, out: Path, *extra) -> list[str]:
    args = ["pack", "--media-root", str(real_data), "--model", str(model_dir), "--seq-len", "2048", "--output",
            str(out), "--workers", "1", "--no-progress", "--max-reject-fraction", "0.2"]
    for p in inputs:
        args += ["--input", str(p)]
    return args + [str(x) for x in extra]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, real_data, model_dir) -> dict:
    """A single run and the two nodes of a 2-node split of the same three inputs (nodes through the
    real CLI), plus the inputs."""
    tmp = tmp_path_factory.mktemp("nodes")
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:600]
    a, b = tmp / "a.jsonl", tmp / "b.jsonl"
    a.write_text("".join(lines[:400]), encoding="utf-8")
    b.write_text("".join(lines[400:]), encoding="utf-8")
    inputs = [a, b, real_data / "broken.jsonl"]
    single = run_pack(load_config(input=[str(p) for p in inputs], media_root=str(real_data), model=str(model_dir),
                                  seq_len=2048, output=str(tmp / "single"), workers=1, progress=False))
    for r in (0, 1):
        res = CliRunner().invoke(app, _pack_args(inputs, real_data, model_dir, tmp / f"n{r}", "--num-nodes", 2,
                                                 "--node-rank", r))
        assert res.exit_code == 0, (res.output, res.exception)
    return {"tmp": tmp, "inputs": inputs, "single": single}


def _packed_ids(out: Path) -> list[tuple[str, str]]:
    """(id_kind, id) of every sample in the tars of ``out``."""
    return [(s.get("id_kind", "str"), str(s["id"])) for raw in read_packs(out)
            for s in json.loads(raw["json"])["samples"]]


def _rejects(out: Path) -> Counter:
    return Counter((r["file"], r["line"], r["reason"]) for r in map(json.loads, (out / "rejects.jsonl").open()))


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def test_nodes_split_the_input_tasks_round_robin(tmp_path, real_data, model_dir):
    """Small tasks (64 KiB) inside one file: each task goes to exactly one node, the union is every task."""
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:400]
    (tmp_path / "in.jsonl").write_text("".join(lines), encoding="utf-8")
    cfg = lambda n, r: load_config(input=[str(tmp_path / "in.jsonl")], model=str(model_dir),  # noqa: E731
                                   output=str(tmp_path / "o"), num_nodes=n, node_rank=r)
    every = all_ranges(cfg(1, 0), 64 << 10)
    assert len(every) >= 5
    assert [(x.start, x.end) for x in every] == list(zip([0] + [x.end for x in every[:-1]], [x.end for x in every]))
    for n in (2, 3):
        parts = [node_ranges(cfg(n, r), 64 << 10) for r in range(n)]
        assert all(total == len(every) for _, total in parts)
        got = sorted((x for p, _ in parts for x in p), key=lambda x: x.start)
        assert got == every  # every task once, no task twice
        assert [len(p) for p, _ in parts] == [len(select_tasks(len(every), n, r)) for r in range(n)]
    assert select_tasks(7, 3, 1) == [1, 4]
    with pytest.raises(ValueError):
        select_tasks(7, 3, 3)


def test_nodes_pack_exactly_what_a_single_run_packs(runs):
    single, tmp = runs["single"], runs["tmp"]
    n0, n1 = tmp / "n0", tmp / "n1"
    reps = [_report(n0), _report(n1)]
    # own shard names: node prefix, never shared
    names = [set(r["shard_sha256"]) for r in reps]
    assert all(x.startswith("node0-of-2-shard-") for x in names[0]) and names[0]
    assert all(x.startswith("node1-of-2-shard-") for x in names[1]) and names[1]
    assert not names[0] & names[1]
    assert [r["nodes"]["node_rank"] for r in reps] == [0, 1] and {r["nodes"]["num_nodes"] for r in reps} == {2}
    assert reps[0]["nodes"]["split_id"] == reps[1]["nodes"]["split_id"]
    assert [r["nodes"]["tasks"] for r in reps] == [2, 1] and {r["nodes"]["tasks_total"] for r in reps} == {3}
    assert reps[0]["model_fingerprint"] == reps[1]["model_fingerprint"] == _report(tmp / "single")["model_fingerprint"]
    # every accepted id exactly once across the nodes, and the same ids as the single run
    ids0, ids1, ids = _packed_ids(n0), _packed_ids(n1), _packed_ids(tmp / "single")
    assert len(set(ids0)) == len(ids0) and len(set(ids1)) == len(ids1) and not set(ids0) & set(ids1)
    assert sorted(ids0 + ids1) == sorted(ids) and len(ids) == single["samples_packed"]
    # the same rejections (overlong included) and records read
    assert _rejects(n0) + _rejects(n1) == _rejects(tmp / "single")
    for k in ("records_read", "samples_packed", "rejected", "dropped_overlong"):
        assert reps[0][k] + reps[1][k] == single[k], k
    assert all(r["identity_holds"] for r in reps)
    assert single["rejected"] > 0 and single["dropped_overlong"] > 0  # both kinds are exercised


def test_metadataset_blend_loads_in_proportion_through_energon(runs):
    tmp = runs["tmp"]
    blend = tmp / "blend.yaml"
    res = CliRunner().invoke(app, ["metadataset", str(tmp / "n0"), str(tmp / "n1"), "-o", str(blend),
                                   "--subflavor", "source=demo", "--subflavor", "1:node=one"])
    assert res.exit_code == 0, (res.output, res.exception)
    doc = yaml.safe_load(blend.read_text())
    assert doc["__class__"] == "MetadatasetV2" and doc["__module__"] == "megatron.energon"
    entries = doc["splits"]["train"]["blend"]
    want = {str(tmp / f"n{r}"): _report(tmp / f"n{r}")["samples_packed"] for r in (0, 1)}
    assert {e["path"]: e["weight"] for e in entries} == want and all(Path(e["path"]).is_absolute() for e in entries)
    assert [e["subflavors"] for e in entries] == [{"source": "demo"}, {"source": "demo", "node": "one"}]
    # Energon draws each pack from node r with probability w_r / sum(w)
    n = 2000
    drawn, flavors = Counter(), {}
    for _, pack in zip(range(n), iter_blend(blend, seed=7)):
        path = str(pack.__sources__[0].dataset_path)
        drawn[path] += 1
        flavors[path] = pack.__subflavors__
    assert flavors == {e["path"]: e["subflavors"] for e in entries}
    p = want[str(tmp / "n0")] / sum(want.values())
    share = drawn[str(tmp / "n0")] / n
    sigma = math.sqrt(p * (1 - p) / n)
    print(f"weights {want}: node 0 expected {p:.4f}, drawn {share:.4f} of {n} (sigma {sigma:.4f})")
    assert abs(share - p) < 4 * sigma
    assert abs(share - 0.5) > 8 * sigma  # the weights matter: an unweighted blend would be told apart
    # --weight tokens, and the same file written again (it is vlmpack's)
    res = CliRunner().invoke(app, ["metadataset", str(tmp / "n0"), str(tmp / "n1"), "-o", str(blend),
                                   "--weight", "tokens"])
    assert res.exit_code == 0, res.output
    assert [e[1] for e in read_metadataset(blend)[0]] == [_report(tmp / f"n{r}")["tokens"] for r in (0, 1)]


def test_check_accepts_the_blend_and_finds_a_hand_edited_weight(runs):
    tmp = runs["tmp"]
    blend = tmp / "checked.yaml"
    assert run_cli(["metadataset", tmp / "n0", tmp / "n1", "-o", blend]).returncode == 0
    ok = run_cli(["check", blend, "--workers", "0"])
    assert ok.returncode == 0, ok.stderr
    assert "check passed" in ok.stdout and "weights = recorded samples" in ok.stdout
    doc = yaml.safe_load(blend.read_text())
    doc["splits"]["train"]["blend"][0]["weight"] += 1
    edited = tmp / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc))
    problems = check_blend(edited, num_workers=0)["problems"]
    assert len(problems) == 1 and "not the outputs' recorded counts" in problems[0], problems


def test_metadataset_refuses_outputs_that_disagree(runs, real_data, model_dir):
    tmp = runs["tmp"]
    n0, n1 = tmp / "n0", tmp / "n1"
    lines = (real_data / "real_sft.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:40]
    (tmp / "small.jsonl").write_text("".join(lines), encoding="utf-8")
    wide = tmp / "wide"
    run_pack(load_config(input=[str(tmp / "small.jsonl")], media_root=str(real_data), model=str(model_dir),
                         seq_len=4096, output=str(wide), workers=1, progress=False))

    proc = run_cli(["metadataset", n0, n1, wide, "-o", tmp / "refused.yaml"])  # through the error boundary
    assert proc.returncode == 2 and "disagree on seq_len" in one_error_line(proc.stderr)

    def refused(*args) -> str:
        res = CliRunner().invoke(app, ["metadataset", *map(str, args), "-o", str(tmp / "refused.yaml")])
        assert isinstance(res.exception, ConfigError), (res.output, res.exception)
        assert not (tmp / "refused.yaml").exists()
        return str(res.exception)

    assert "disagree on seq_len" in refused(n0, n1, wide)
    copy = tmp / "copy"
    shutil.copytree(tmp / "single", copy)
    assert "in two outputs byte for byte" in refused(tmp / "single", copy)
    assert "lacks node(s) 1" in refused(n0)
    assert "more than once" in refused(n0, n1, n0)
    assert "report.json is missing" in refused(n0, n1, tmp)
    (tmp / "notes.yaml").write_text("mine\n")
    res = CliRunner().invoke(app, ["metadataset", str(n0), str(n1), "-o", str(tmp / "notes.yaml")])
    assert isinstance(res.exception, ConfigError) and "not written by vlmpack" in str(res.exception)
    assert (tmp / "notes.yaml").read_text() == "mine\n"


def test_duplicate_ids_across_nodes_of_one_split_are_refused(runs):
    """A sample id in two nodes' slices (a single run rejects the second as duplicate_id)."""
    tmp = runs["tmp"]
    outs = [(str(tmp / f"n{r}"), _report(tmp / f"n{r}")) for r in (0, 1)]
    ids = {p: set(_packed_ids(Path(p))) for p, _ in outs}
    assert blend_problems(outs, ids) == []
    shared = next(iter(ids[outs[0][0]]))
    ids[outs[1][0]].add(shared)
    problems = blend_problems(outs, ids)
    assert len(problems) == 1 and "accepted by two nodes" in problems[0] and repr(shared[1]) in problems[0]


def test_node_rank_is_checked_and_a_rank_keeps_its_own_output(runs, real_data, model_dir):
    tmp, inputs = runs["tmp"], runs["inputs"]
    proc = run_cli(_pack_args(inputs, real_data, model_dir, tmp / "x", "--num-nodes", 2, "--node-rank", 2))
    assert proc.returncode == 2 and "--node-rank 2 is not below --num-nodes 2" in one_error_line(proc.stderr)
    res = CliRunner().invoke(app, _pack_args(inputs, real_data, model_dir, tmp / "n0", "--num-nodes", 2,
                                             "--node-rank", 1))
    assert isinstance(res.exception, RunDirError) and "holds the run of node 0 of 2" in str(res.exception)
    res = CliRunner().invoke(app, _pack_args(inputs, real_data, model_dir, tmp / "y", "--num-nodes", 4,
                                             "--node-rank", 0))
    assert isinstance(res.exception, ConfigError) and "only 3 task(s)" in str(res.exception)
    assert not (tmp / "y").exists()  # refused before anything was written


def test_outputs_of_different_datasets_blend_with_the_same_shard_names(runs, real_data, model_dir):
    """Two datasets packed apart, both with the default shard names (``shard-000000.tar`` ...), blend:
    Energon reads each output by its path (issue 21 item 6). ``--weight records`` weighs each by the
    records its input held (LLaVA-OneVision-2's rule, rejected ones included), and
    ``vlmpack check BLEND.yaml`` finds the weights as recorded."""
    tmp = runs["tmp"]
    a, b = runs["inputs"][0], runs["inputs"][1]
    outs = []
    for name, inputs in (("da", [a]), ("db", [b, real_data / "broken.jsonl"])):
        run_pack(load_config(input=[str(p) for p in inputs], media_root=str(real_data), model=str(model_dir),
                             seq_len=2048, output=str(tmp / name), workers=1, progress=False,
                             max_reject_fraction=1.0))
        outs.append(tmp / name)
    assert set(_report(outs[0])["shard_sha256"]) & set(_report(outs[1])["shard_sha256"])  # the same names
    res = CliRunner().invoke(app, ["metadataset", *map(str, outs), "--weight", "records", "-o",
                                   str(tmp / "two.yaml")])
    assert res.exit_code == 0, (res.output, res.exception)
    doc = yaml.safe_load((tmp / "two.yaml").read_text())
    weights = [e["weight"] for e in doc["splits"]["train"]["blend"]]
    assert weights == [_report(o)["records_read"] for o in outs]
    assert weights[1] > _report(outs[1])["samples_packed"]  # broken.jsonl's rejected records count too
    checked = check_blend(tmp / "two.yaml", num_workers=0, draws=16)
    assert checked["problems"] == [] and checked["weight"] == "records"
    assert set(checked["drawn"]) <= {str(o) for o in outs} and sum(checked["drawn"].values()) == 16
