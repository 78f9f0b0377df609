"""The conversations a trainer's LLaMA-Factory-style ``qwen2-vl`` chat template renders: what the
``llava-ov2-*`` and ``loongforge-*`` output layouts can hold, and their user / assistant turn texts.

LLaVA-OneVision-2 (``aiak_training_llm/data/chat_templete.py``) and LoongForge
(``loongforge/data/chat_template.py``) both register the template ``qwen2-vl``: default system
``You are a helpful assistant.``, user turns ``<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n``,
assistant turns ``{content}`` + ``<|im_end|>``, ``"\n"`` before each later user turn, each element
tokenized on its own, and each ``<image>`` / ``<video>`` placeholder in a turn expanded by their
``Qwen2VLPlugin`` into ``<|vision_start|>`` + pads + ``<|vision_end|>``. That is the Qwen2-VL /
Qwen2.5-VL chat template (transformers' ``chat_template.json`` of those models) without its final
newline, so vlmpack's count of an accepted conversation is the trainer's plus one. Their plugin
has no audio token, so a sample holding audio is rejected ``layout_unsupported`` before it is
counted (:func:`conversation_problem`), whatever the model family could count.
"""

from __future__ import annotations

import re

from vlmpack.records import MEDIA_KINDS

#: The trainer's ``qwen2-vl`` template's default system prompt (``chat_templete.py``), also the
#: Qwen2-VL / Qwen2.5-VL chat templates' when a conversation has none.
DEFAULT_SYSTEM = "You are a helpful assistant."
#: The placeholder of each media kind of the registry (``<image>``, ``<video>``, ``<audio>``: LLaMA-Factory's,
#: what :func:`turn_text` writes for a media item): text holding one is refused, since the trainer's
#: plugin expands ``<image>`` / ``<video>`` wherever they occur and a reader of the written turns could
#: not tell a literal ``<audio>`` from an audio item's.
PLACEHOLDERS = tuple(f"<{kind}>" for kind in MEDIA_KINDS)
#: The media kinds the trainers' ``qwen2-vl`` rendering takes (their ``Qwen2VLPlugin`` has an image and a
#: video token, no audio one: ``mm_plugin.py``); any other kind is ``layout_unsupported``.
TRAINER_KINDS = ("image", "video")
#: Model types whose chat template renders as the trainer's ``qwen2-vl`` template does.
MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
#: Text the trainer tokenizes apart from the ``assistant`` header before it: a leading newline
#: (after optional blanks) would merge with the header's newline in one rendering and not the other.
_LEADING_NEWLINE = re.compile(r"^\s*[\r\n]")


def turn_text(msg: dict) -> str:
    """A turn's content as the trainer's prompt / caption text: text items as they are, each media
    item its placeholder (``<image>``, ``<video>``: :data:`PLACEHOLDERS`) where it stands."""
    return "".join(c["text"] if c.get("type") == "text" else f"<{c.get('type')}>" for c in msg["content"])


def conversation_problem(messages: list[dict], tools, *, videos: bool) -> tuple[str, str] | None:
    """Why a conversation cannot be written as the trainer's user / assistant turns, rendered by its
    ``qwen2-vl`` template exactly as counted: ``("layout_unsupported", detail)`` or None.

    Accepted: an optional first system turn equal to :data:`DEFAULT_SYSTEM` (what the trainer
    renders anyway), then user, assistant, user, ... ending with an assistant turn, no tool schemas,
    tool calls or reasoning, no text holding a placeholder (:data:`PLACEHOLDERS`), no
    assistant text starting with a newline, no video unless ``videos``, no media of a kind the
    trainer cannot take (audio: not in :data:`TRAINER_KINDS`), so no such sample is written in part."""
    def bad(detail: str) -> tuple[str, str]:
        return "layout_unsupported", detail

    if tools:
        return bad("tool schemas: the trainer's template renders none")
    msgs = list(messages)
    if msgs and msgs[0]["role"] == "system":
        if turn_text(msgs[0]) != DEFAULT_SYSTEM or any(c.get("type") != "text" for c in msgs[0]["content"]):
            return bad(f"a system prompt other than {DEFAULT_SYSTEM!r}: the trainer renders its default one")
        msgs = msgs[1:]
    if not msgs or len(msgs) % 2:
        return bad("not user / assistant turn pairs")
    for i, m in enumerate(msgs):
        want = "user" if i % 2 == 0 else "assistant"
        if m["role"] != want:
            return bad(f"turn {i + 1} is {m['role']}, the trainer reads alternating user / assistant turns")
        if set(m) - {"role", "content"}:
            return bad(f"turn {i + 1} holds {', '.join(sorted(set(m) - {'role', 'content'}))}: the trainer's "
                       "template renders only text and media")
        for c in m["content"]:
            if c.get("type") == "text" and (p := next((p for p in PLACEHOLDERS if p in c["text"]), None)):
                return bad(f"turn {i + 1}'s text holds a literal {p}, which the written turns would read as a "
                           "media item's placeholder (the trainer expands <image> / <video>)")
            if c.get("type") == "video" and not videos:
                return bad("a video: this layout holds images only")
            if c.get("type") in MEDIA_KINDS and c["type"] not in TRAINER_KINDS:
                return bad(f"{c['type']} media: the trainer's qwen2-vl rendering takes {' / '.join(TRAINER_KINDS)} "
                           "only (its plugin has no token for it)")
        if want == "assistant" and _LEADING_NEWLINE.match(turn_text(m)):
            return bad(f"turn {i + 1} starts with a newline, which the trainer tokenizes apart from the "
                       "turn header (the count would not bound its)")
    return None


def turns(messages: list[dict]) -> tuple[list[str], list[str]]:
    """``(prompts, captions)``: the user and the assistant turn texts (:func:`turn_text`) of an
    accepted conversation (a default system turn dropped)."""
    msgs = [m for m in messages if m["role"] != "system"]
    return [turn_text(m) for m in msgs[0::2]], [turn_text(m) for m in msgs[1::2]]


def model_problem(model_type: str) -> str | None:
    """One line unless ``model_type`` is one of :data:`MODEL_TYPES` (whose chat template renders as
    the trainer's ``qwen2-vl`` template does)."""
    if model_type in MODEL_TYPES:
        return None
    return (f"the trainer renders with its qwen2-vl template (default system prompt), which the chat template "
            f"of model type {model_type!r} does not match; use a {' / '.join(MODEL_TYPES)} model directory")
