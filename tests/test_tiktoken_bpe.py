"""Counting through tiktoken (vlmpack.models.tiktoken_bpe) gives the tokenizer's own ids: on every
rendered demo text, on code points of every plane in several contexts and on random text, for each
tokenizer of the suite that passes the check; a tokenizer that does not pass keeps its own call."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_models_gemma3 import gemma3_dir  # noqa: F401 - fixture (SentencePiece: not byte-level BPE)
from test_models_glm4v import glm4v_dir  # noqa: F401 - fixture (byte-level BPE)
from test_models_kimi_k25 import kimi_dir  # noqa: F401 - fixture (byte-level BPE, several merges a token)
from test_models_smolvlm import smolvlm_dir  # noqa: F401 - fixture (byte-level BPE)

from vlmpack.layouts import to_canonical
from vlmpack.models import FAMILIES, load_recipe, model_type
from vlmpack.models import tiktoken_bpe as tb
from vlmpack.models.chat_tokenizer import load_chat_tokenizer

#: the rendered demo texts of the two Qwen tokenizers: Qwen2Tokenizer (also InternVL's, LLaVA-OV's, Qwen3-VL's)
#: and Qwen3_5Tokenizer (another pre-tokenizer pattern); the families' every-image sweeps compare the counts of
#: all (recipes are on in the suite)
DEMO_DIRS = ("model_dir", "qwen3_5_dir")
#: every tokenizer of the suite that passes the check
BPE_DIRS = (*DEMO_DIRS, "smolvlm_dir", "glm4v_dir")


@pytest.fixture
def fresh_recipes(tmp_path):
    """Recipes under a fresh cache root for the test, no encoder kept from before (restored after)."""
    saved, kept = load_recipe._root[0], dict(tb._ENCODERS)
    load_recipe.use_cache_root(tmp_path / "cache")
    tb._ENCODERS.clear()
    yield
    load_recipe._root[0] = saved
    tb._ENCODERS.clear()
    tb._ENCODERS.update(kept)


def _encoder(d):
    tok = load_chat_tokenizer(d)
    assert tb.full_problem(tok) is None
    return tok, tb.TiktokenBPE(tok)


#: one (tokenizer, encoder) per directory for the comparisons below (a load and the vocabulary check: ~1.5-2.5 s)
_BUILT: dict = {}


def _cached_encoder(d):
    if d not in _BUILT:
        _BUILT[d] = _encoder(d)
    return _BUILT[d]


@pytest.mark.parametrize("name", DEMO_DIRS)
def test_every_demo_text_gives_the_tokenizer_ids(request, real_data, name):
    d = request.getfixturevalue(name)
    family = FAMILIES[model_type(d)](d)
    tok, fast = _cached_encoder(d)  # first used here in file order: the first call below fills the memo
    texts = []
    for line in (real_data / "real_sft.jsonl").read_text().splitlines():
        messages = to_canonical(json.loads(line))[0]
        texts.append(family.render(messages))
    assert len(texts) > 5000
    want = tok(texts)["input_ids"]
    assert fast(texts) == want
    assert fast(texts) == want  # again, short pieces now from the memo
    assert sum(map(len, want)) > 1_000_000


@pytest.mark.parametrize("name", BPE_DIRS)
def test_code_points_of_every_plane_in_context_give_the_tokenizer_ids(request, name):
    """Every code point below U+3000 (the scripts with case, digits, marks and spaces) and every 127th above,
    alone and between letters, spaces, digits, an apostrophe, a combining mark and newlines: the regex
    engines' classes (letters, numbers, white space, case-folded contractions) and NFC agree. (Once, on the
    demo model: all 1,112,064 code points in 9 contexts, equal; about 9 minutes.)"""
    tok, fast = _cached_encoder(request.getfixturevalue(name))
    points = [c for c in range(0x110000) if c < 0x3000 or c % 127 == 0]
    points = [c for c in points if not 0xD800 <= c < 0xE000]
    for form in ("{c}", "a{c}b {c}", "'{c} 1{c}2", "{c}\u0301\n\n {c}{c}\t"):
        texts = [form.format(c=chr(c)) for c in points]
        want = tok(texts)["input_ids"]
        got = fast(texts)
        bad = [texts[i] for i in range(len(texts)) if got[i] != want[i]]
        assert not bad, bad[:5]


_FRAGMENTS = ["<|im_start|>", "<|im_end|>", "<|image_pad|>", "<tool_call>", "<think>", "<|im_", "|>", "'s", "'S",
              "'ſ", "'ll", "'LL", "'re", "'ve", "'m", "'d", "'t", "K", "\u212a", " ", "  ", "\t", "\n", "\r\n", "\n\n",
              "\x0b", "\x0c", "\x85", "\xa0", "\u2028", "\u3000", "\u200b", "123", "٣", "１２", "Ⅻ", "é", "e\u0301",
              "\u0301", "Å", "A\u030a", "ﬁ", "日本語", "한국어", "Ελληνικά", "кириллица", "עברית", "عربى", "🙂", "👩‍💻",
              "…", "--", "!!", "```", "{\"a\": 1}", "https://x.y/z?q=1", "\ufeff", "\U0001d400", "ǅ", "ß", "İ"]


@pytest.mark.parametrize("name", BPE_DIRS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=12)), max_size=30))
def test_random_text_gives_the_tokenizer_ids(request, name, parts):
    tok, fast = _cached_encoder(request.getfixturevalue(name))
    text = "".join(parts)
    assert fast([text]) == tok([text])["input_ids"]


@pytest.mark.usefixtures("fresh_recipes")
def test_the_check_is_recorded_once_and_not_run_without_recipes(model_dir, monkeypatch):
    tok = load_chat_tokenizer(model_dir)
    first = tb.fast_encoder(model_dir, tok)
    assert isinstance(first, tb.TiktokenBPE)
    assert load_recipe.read(model_dir, "bpe") == {"tiktoken": True, "why": None}
    tb._ENCODERS.clear()

    def not_again(_tok):
        raise AssertionError("the vocabulary check ran again")

    monkeypatch.setattr(tb, "full_problem", not_again)
    assert isinstance(tb.fast_encoder(model_dir, tok), tb.TiktokenBPE)  # from the recipe
    family = FAMILIES[model_type(model_dir)](model_dir)
    assert family.fast_bpe is not None
    load_recipe.use_cache_root(None)
    assert tb.fast_encoder(model_dir, tok) is None  # recipes off: the tokenizer's own call


@pytest.mark.usefixtures("fresh_recipes")
@pytest.mark.parametrize("name", ("gemma3_dir", "kimi_dir"))
def test_a_tokenizer_of_another_kind_keeps_its_own_call(request, name):
    d = request.getfixturevalue(name)
    tok = load_chat_tokenizer(d)
    why = tb.full_problem(tok)
    assert why is not None and tb.fast_encoder(d, tok) is None
    assert load_recipe.read(d, "bpe") == ({"tiktoken": False, "why": why} if tb.problem(tok) is None else None)
    assert FAMILIES[model_type(d)](d).fast_bpe is None  # counting keeps the tokenizer's own call
    if tb.problem(tok) is not None:  # a recipe that says yes is not enough: the pipeline's shape is checked each load
        load_recipe.record(d, "bpe", {"tiktoken": True, "why": None})
        tb._ENCODERS.clear()
        assert tb.fast_encoder(d, tok) is None


def _tiny(merges, vocab_extra, pattern=r"\s+|\S+"):
    """A byte-level BPE tokenizer of the 256 byte tokens + ``vocab_extra`` (ids in that order) and ``merges``."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = {b: c for c, b in tb.byte_level_alphabet().items()}
    vocab = {alphabet[b]: b for b in range(256)}
    for tok in vocab_extra:
        vocab[tok] = len(vocab)
    backend = Tokenizer(models.BPE(vocab, merges))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_the_vocabulary_check_finds_what_tiktoken_would_merge_otherwise():
    ok = _tiny([("a", "b"), ("ab", "c")], ["ab", "abc"])
    assert tb.full_problem(ok) is None
    assert tb.TiktokenBPE(ok)(["abc abd cab"]) == ok(["abc abd cab"])["input_ids"]
    # merge order unlike id order: tiktoken would take "bc" first, tokenizers "ab"
    swapped = _tiny([("a", "b"), ("b", "c")], ["bc", "ab"])
    assert tb.full_problem(swapped) == "merge order is not id order"
    assert tb.TiktokenBPE(swapped)(["abc"]) != swapped(["abc"])["input_ids"]
    # a token no merge makes: tiktoken would still take it whole
    orphan = _tiny([("a", "b")], ["ab", "xy"])
    assert tb.full_problem(orphan) == "a token is made by no merge or by several"
    assert tb.TiktokenBPE(orphan)(["xy"]) != orphan(["xy"])["input_ids"]


def test_a_lone_surrogate_raises_as_the_tokenizer_does(model_dir):
    tok, fast = _cached_encoder(model_dir)
    for text in ("a\ud800b", "<|im_start|>\udcff<|im_end|>"):
        with pytest.raises(Exception):  # noqa: B017 - the tokenizer raises TypeError, the normalizer alike
            tok([text])
        with pytest.raises((TypeError, UnicodeEncodeError)):
            fast([text])
    plain = _tiny([("a", "b")], ["ab"])  # no normalizer: encode_ordinary alone would replace the surrogate
    with pytest.raises(Exception):  # noqa: B017
        plain(["ab\ud800"])
    with pytest.raises(UnicodeEncodeError):
        tb.TiktokenBPE(plain)(["ab\ud800"])


class _Vocab:
    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        assert with_added_tokens is False  # what _byte_ranks asks for
        return self.vocab


_ALPHABET = sorted(tb.byte_level_alphabet())


@settings(deadline=None, max_examples=300)
@given(st.lists(st.text(st.one_of(st.sampled_from(_ALPHABET), st.characters(max_codepoint=0x2FF)), min_size=1,
                        max_size=6), min_size=1, max_size=30, unique=True))
def test_byte_ranks_map_a_token_to_its_bytes_or_refuse_a_foreign_character(tokens):
    """The translate-and-encode of ``_byte_ranks`` gives, token by token, the bytes of the alphabet's
    character -> byte map (GPT-2's ``bytes_to_unicode`` inverted), and None exactly when a token holds a
    character outside the alphabet (Latin-1 ones among them) or two tokens are the same bytes."""
    alphabet = tb.byte_level_alphabet()
    want: dict[bytes, int] | None = {}
    for i, tok in enumerate(tokens):
        if any(c not in alphabet for c in tok):
            want = None
            break
        want[bytes(alphabet[c] for c in tok)] = i
    if want is not None and len(want) != len(tokens):
        want = None
    assert tb._byte_ranks(_Vocab({t: i for i, t in enumerate(tokens)})) == want
