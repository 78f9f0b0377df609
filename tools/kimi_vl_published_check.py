"""One-off record of what Kimi-VL's published processor gives (not run by the tests).

Kimi-VL's processor is remote code on the Hugging Face hub (``processing_kimi_vl.py``,
``image_processing_kimi_vl.py``), which imports only under transformers 4.51 and whose image
processor needs torchvision; vlmpack restates its rules (``vlmpack.models.kimi_vl``) and must not
carry its text. This script is run once, by hand, with:

- ``PUB``: a scratch folder holding ``processing_kimi_vl.py`` and ``image_processing_kimi_vl.py``
  reconstructed from public copies (see ``tools/demo_data/model_files/kimi_vl/SOURCES.md``) and a
  PIL-exact stand-in of the four ``torchvision.transforms.functional`` calls they make
  (``pad``, ``center_crop``, ``to_tensor``, ``normalize``);
- ``TF451``: a ``pip install --target`` folder of transformers 4.51.3 (+ tokenizers);
- this project's torch;

as ``PYTHONPATH=PUB:TF451 python tools/kimi_vl_published_check.py MODEL_DIR DEMO_ROOT OUT.json``,
where ``MODEL_DIR`` is ``tools/demo_data/kimi_vl_dir.py``'s directory and ``DEMO_ROOT`` the demo set
(``real_sft.jsonl`` + ``images/``). It records, for every distinct size of the demo set's images
(decoded by transformers 4.51.3's ``load_image``, EXIF orientation applied; recorded per file name) and for edge sizes
(a side under one patch, the ``in_token_limit`` boundary, the 512-patches-per-side refusal):

- ``KimiVLProcessor.__call__(images=[image], text=...)`` on an image of that size: its
  ``image_grid_hws`` and the number of ``<|media_pad|>`` ids it writes, or ``"Exceed pos emb"``
  when the image processor refuses the size;
- ``KimiVLProcessor.get_image_tokens(width, height)`` (the count Moonshot wrote for vLLM);

and the full ``input_ids`` of ``__call__`` for a few conversations rendered by the directory's chat
template (transformers 4.51.3's ``apply_chat_template``), with their image sizes. Output:
``tests/fixtures/kimi_vl_published.json``, which ``tests/test_models_kimi_vl.py`` compares with
vlmpack's rule on every image sample of the demo set.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Edge sizes (width, height): tiny, one side under a patch, at / above the 4096-patch limit, and
#: the 512-patches-a-side refusal with and without rescaling.
EDGES = [(1, 1), (13, 13), (14, 14), (27, 29), (28, 28), (29, 29), (39, 7), (896, 896), (910, 896), (896, 910),
         (900, 918), (7140, 10), (7141, 10), (10, 7141), (7154, 10), (7155, 10), (7168, 14), (7169, 10), (10, 7169),
         (100, 9000), (8000, 100), (28000, 28), (4000, 3000), (5640, 3172), (1, 5000), (3000, 1)]

#: Conversations whose whole ``input_ids`` are recorded: (messages, image sizes).
CONVERSATIONS = [
    ([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in the picture?"}]},
      {"role": "assistant", "content": [{"type": "text", "text": "A red square."}]}], [(640, 480)]),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Compare "}, {"type": "image"}, {"type": "text",
                                                                                            "text": " and "},
                                   {"type": "image"}]},
      {"role": "assistant", "content": "Same.\nBoth blue."},
      {"role": "user", "content": "Sure?"},
      {"role": "assistant", "content": [{"type": "text", "text": "Yes."}]}], [(1920, 1080), (27, 29)]),
]


def demo_sizes(root: Path) -> dict[str, str]:
    """``{image file name: "WxH"}`` of the demo set's image records, decoded sizes."""
    from transformers.image_utils import load_image

    sizes: dict[str, str] = {}
    for line in (root / "real_sft.jsonl").read_text().splitlines():
        rec = json.loads(line)
        im = rec.get("images") or rec.get("image")
        for name in ([im] if isinstance(im, str) else im or []):
            if name not in sizes:
                w, h = load_image(str(root / name)).size
                sizes[name] = f"{w}x{h}"
    return sizes


def main(model_dir: str, demo_root: str, dest: str) -> None:
    import transformers
    from image_processing_kimi_vl import KimiVLImageProcessor
    from PIL import Image
    from processing_kimi_vl import KimiVLProcessor
    from transformers import PreTrainedTokenizerFast

    d = Path(model_dir)
    pre = json.loads((d / "preprocessor_config.json").read_text())
    ip = KimiVLImageProcessor(**{k: pre[k] for k in ("patch_size", "pad_input", "image_mean", "image_std",
                                                     "in_token_limit", "merge_kernel_size")})
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    proc = KimiVLProcessor(image_processor=ip, tokenizer=tok, chat_template=(d / "chat_template.jinja").read_text())
    pad_id = tok.convert_tokens_to_ids("<|media_pad|>")
    image_text = "<|media_start|>image<|media_content|><|media_pad|><|media_end|>"

    files = demo_sizes(Path(demo_root))
    res = {}
    for key in sorted(set(files.values())) + [f"{w}x{h}" for w, h in EDGES]:
        w, h = map(int, key.split("x"))
        img = Image.new("RGB", (w, h), (200, 30, 10))
        try:
            out = proc(images=[img], text=image_text)
            call = [*map(int, out["image_grid_hws"][0]), sum(i == pad_id for i in out["input_ids"][0])]
        except ValueError as e:
            call = str(e)
        res[key] = {"call": call, "get_image_tokens": proc.get_image_tokens(w, h)}
    convs = []
    for messages, sizes in CONVERSATIONS:
        text = proc.apply_chat_template(messages, tokenize=False)
        imgs = [Image.new("RGB", s) for s in sizes]
        out = proc(images=imgs, text=text)
        convs.append({"messages": messages, "sizes": sizes, "text": text,
                      "input_ids": list(map(int, out["input_ids"][0]))})
    Path(dest).write_text(json.dumps({
        "what": "Kimi-VL's published KimiVLProcessor (reconstructed from public copies) under transformers "
                f"{transformers.__version__}, by tools/kimi_vl_published_check.py (see its docstring): per image size "
                "WIDTHxHEIGHT, call = [grid_h, grid_w, <|media_pad|> ids written] or the processor's error, and "
                "get_image_tokens; conversations: full input_ids",
        "transformers": transformers.__version__, "demo_files": files,
        "sizes": res, "conversations": convs}, indent=0))


if __name__ == "__main__":
    main(*sys.argv[1:4])
