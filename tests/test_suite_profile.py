"""tools/suite_profile.py: a py-spy raw profile summed per test, per library and per caller."""

from __future__ import annotations

from suite_profile import callers, is_function, library, owner, stacks, summary

_RAW = "\n".join([
    # a test's own frames, leaf in PIL
    'process 1:"python -m pytest";process 2:"python -c import sys";<module> (<string>:1);'
    'pytest_pyfunc_call (_pytest/python.py:166);test_sweep (test_models_x.py:40);'
    'decode (vlmpack/media/image.py:10);ImageFile.load (PIL/ImageFile.py:300) 30',
    # a pack worker forked from that test keeps its frames; leaf in vlmpack
    'process 1:"python -m pytest";process 2:"python -c import sys";process 3:"python -c import sys";'
    'test_sweep (test_models_x.py:41);run_pack (vlmpack/pack/pipeline.py:262);'
    'load_chat_tokenizer (vlmpack/models/chat_tokenizer.py:28);'
    'PreTrainedTokenizerBase.from_pretrained (transformers/tokenization_utils_base.py:1524) 10',
    # a fork server's child: no test frame, charged to its command line
    'process 1:"python -m pytest";process 9:"python -B -c from multiprocessing.forkserver import main";'
    'main (multiprocessing/forkserver.py:1);run_pack (vlmpack/pack/pipeline.py:262);'
    'load_chat_tokenizer (vlmpack/models/chat_tokenizer.py:28) 4',
    "process 1:\"python -m pytest\" ",  # no count: skipped
])


def test_samples_are_charged_to_tests_libraries_and_callers(tmp_path):
    raw = tmp_path / "suite.raw"
    raw.write_text(_RAW + "\n")
    rows = list(stacks(str(raw)))
    assert [n for _, n in rows] == [30, 10, 4]
    assert [owner(f) for f, _ in rows] == ["test_models_x.py::test_sweep"] * 2 + [
        'process "python -B -c from multiprocessing.forkserver import main"']
    assert [library(f) for f, _ in rows] == ["PIL", "transformers", "vlmpack.models.chat_tokenizer"]
    text = summary(str(raw), rate=20, top=10)
    assert text.startswith("2.2 CPU-s in 44 samples")
    assert "      2.0  test_models_x.py::test_sweep" in text and "      1.5  PIL" in text
    # hot spots by bare or qualified name, a method named bare too (from_pretrained)
    spots = ("      0.7  run_pack", "      0.7  load_chat_tokenizer", "      1.5  ImageFile.load",
             "      0.5  from_pretrained")
    assert all(spot in text for spot in spots), text
    assert is_function("ImageFile.load", "load") and not is_function("ImageFile.load_end", "load")
    assert callers(str(raw), "load_chat_tokenizer", rate=20, top=5, depth=1).splitlines() == [
        "      0.7  load_chat_tokenizer < run_pack"]
