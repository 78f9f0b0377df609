"""Build a model directory's own transformers processor, images only, where torchvision is missing.

``AutoProcessor.from_pretrained`` fails for every processor that has a video processor when
torchvision cannot be imported (transformers 5.x: ``ImportError: Video processor cannot be loaded``,
whatever ``backend=`` says), which rules out most VLM processors on a CPU-only machine without it.
:func:`build_processor` builds the same processor as ``from_pretrained`` does, from its parts:

- the processor class: ``processor_class`` of ``processor_config.json`` /
  ``preprocessor_config.json`` / ``tokenizer_config.json``, else AutoProcessor's ``model_type``
  mapping (``transformers.models.auto.processing_auto.PROCESSOR_MAPPING_NAMES``);
- each sub-processor in the class's ``get_attributes()`` order: ``AutoTokenizer``,
  ``AutoImageProcessor(backend="pil")`` (the PIL/numpy image processors of transformers 5),
  ``AutoFeatureExtractor`` (audio), ``AutoVideoProcessor`` where it loads, else ``None``;
- ``cls.from_args_and_dict(args, *cls.get_processor_dict(model_dir))``, what
  ``ProcessorMixin.from_pretrained`` calls (``processor_config.json`` values and the chat template);
- a ``None`` video processor is accepted by a subclass whose ``check_argument_for_proper_class``
  lets it through (``ProcessorMixin.__init__`` type-checks every sub-processor).

Source: transformers 5.x ``processing_utils.ProcessorMixin.from_pretrained`` /
``_get_arguments_from_pretrained`` / ``from_args_and_dict``. Errors are one-line
:class:`~vlmpack.errors.ConfigError` saying why the processor cannot be built here.
"""

from __future__ import annotations

import json
from pathlib import Path

from vlmpack.errors import ConfigError
from vlmpack.models.chat_tokenizer import require_tokenizer_files

_NO_VIDEO: dict[type, type] = {}


def processor_class(model_dir: str | Path) -> type:
    """The transformers processor class ``model_dir`` names (module docstring); :class:`ConfigError`
    when it names none or one that this transformers lacks."""
    import transformers

    d = Path(model_dir)
    name = None
    for f in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        if (d / f).is_file():
            try:
                name = json.loads((d / f).read_text()).get("processor_class")
            except (ValueError, AttributeError):
                raise ConfigError(f"{d / f}: not a JSON object") from None
            if name:
                break
    if not name:
        from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

        try:
            mt = json.loads((d / "config.json").read_text())["model_type"]
        except (OSError, ValueError, KeyError):
            raise ConfigError(f"{model_dir}: no config.json with a model_type") from None
        name = PROCESSOR_MAPPING_NAMES.get(mt)
        if not name:
            raise ConfigError(f"{model_dir}: transformers {transformers.__version__} has no processor for "
                              f"model_type {mt!r}")
    try:
        cls = getattr(transformers, name)
        cls.get_attributes()  # a class whose backend is missing is a placeholder that raises here
        return cls
    except Exception as e:  # noqa: BLE001 - a lazy import may raise anything (a missing optional backend)
        raise ConfigError(f"{model_dir}: transformers' {name} cannot be imported here "
                          f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


def _accepting_no_video(cls: type) -> type:
    """``cls`` with a ``None`` video processor accepted (module docstring); one subclass per class."""
    if cls not in _NO_VIDEO:
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument is None and "video_processor" in argument_name:
                return None
            return super(sub, self).check_argument_for_proper_class(argument_name, argument)

        sub = type(cls.__name__, (cls,), {"check_argument_for_proper_class": check_argument_for_proper_class,
                                          "__module__": cls.__module__, "__doc__": cls.__doc__})
        _NO_VIDEO[cls] = sub
    return _NO_VIDEO[cls]


def build_processor(model_dir: str | Path):
    """``model_dir``'s processor as ``AutoProcessor.from_pretrained(model_dir)`` builds it, with the
    PIL image backend and no video processor where torchvision is missing (module docstring).

    Returns the processor (a ``transformers.ProcessorMixin``; ``.video_processor`` may be None).
    Raises :class:`ConfigError` (one line) when the class cannot be imported or a part cannot be
    loaded, e.g. an image processor that exists only for torchvision.
    """
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer
    from transformers.processing_utils import _get_modality_for_attribute

    cls = processor_class(model_dir)
    d = str(model_dir)
    args = []
    for attr in cls.get_attributes():
        modality = _get_modality_for_attribute(attr)
        try:
            if modality == "tokenizer":
                require_tokenizer_files(d)
                args.append(AutoTokenizer.from_pretrained(d))
            elif modality == "image_processor":
                args.append(AutoImageProcessor.from_pretrained(d, backend="pil"))
            elif modality == "feature_extractor":
                args.append(AutoFeatureExtractor.from_pretrained(d))
            elif modality == "video_processor":
                args.append(_video_processor(d))
            else:
                raise ConfigError(f"{model_dir}: {cls.__name__} needs a {attr}, which vlmpack cannot build")
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - transformers raises many kinds here
            first = str(e).splitlines()[0] if str(e) else ""
            raise ConfigError(f"{model_dir}: the {attr} of {cls.__name__} cannot be built here "
                              f"({type(e).__name__}: {first})") from None
    try:
        processor_dict, kwargs = cls.get_processor_dict(d)
        return _accepting_no_video(cls).from_args_and_dict(args, processor_dict, **kwargs)
    except Exception as e:  # noqa: BLE001
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"{model_dir}: {cls.__name__} cannot be built ({type(e).__name__}: {first})") from None


def _video_processor(model_dir: str):
    """The video processor where transformers can build one (it needs torchvision), else None."""
    try:
        from transformers import AutoVideoProcessor

        return AutoVideoProcessor.from_pretrained(model_dir)
    except Exception:  # noqa: BLE001 - ImportError / AttributeError without torchvision: images only
        return None
