"""The checkpoint's processors — tokenizer, image processor, feature extractor, video processor and
the multimodal ``AutoProcessor`` — loaded from the model's own directory as ``transformers.pipeline``
loads them (SPEC T2), once each, and the optional packages they need named when missing.

A pipeline class says which components it needs (``Pipeline._load_tokenizer``,
``_load_image_processor``, ``_load_feature_extractor``, ``_load_video_processor``,
``_load_processor``): ``True`` needs it, ``None`` takes it when it loads, ``False`` never reads it —
the rule of ``transformers.pipelines._load_pipeline_component``, followed here for a model
``transformers.pipeline`` receives as an object (it then loads no component by itself).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError

log = logging.getLogger(__name__)

COMPONENTS = ("tokenizer", "image_processor", "feature_extractor", "video_processor", "processor")
"""The keywords ``transformers.pipeline`` takes a component by, in the order it resolves them."""
AUTO_CLASSES = {"tokenizer": "AutoTokenizer", "image_processor": "AutoImageProcessor",
                "feature_extractor": "AutoFeatureExtractor", "video_processor": "AutoVideoProcessor",
                "processor": "AutoProcessor"}
EXTRAS = (
    (("pil", "pillow"), "Pillow", "pip install 'intelrt[vision]'"),
    (("torchvision",), "torchvision",
     "install the torchvision built for your torch (pytorch.org/get-started/locally), as transformers' "
     "vision extra does"),
    (("torchaudio",), "torchaudio",
     "install the torchaudio built for your torch (pytorch.org/get-started/locally), as transformers' "
     "audio extra does"),
    (("soundfile", "soxr", "librosa"), "soundfile / soxr", "pip install 'intelrt[audio]'"),
)
"""Words of a missing-backend error (``requires_backends``) → the package and how to install it."""
_FAILED = object()


def missing_package(exc: BaseException) -> tuple[str, str] | None:
    """(package, how to install it) when ``exc`` says an optional package is missing, else ``None``."""
    text = str(exc).lower()
    if not isinstance(exc, ImportError) and "requires the" not in text and "install" not in text:
        return None
    for words, package, how in EXTRAS:
        if any(word in text for word in words):
            return package, how
    return None


def require_vision(what: str) -> None:
    """Refuse ``what`` with the extra to install when Pillow is missing (transformers' ``vision``
    backend: ``is_vision_available``)."""
    if importlib.util.find_spec("PIL") is None:
        raise ConfigurationError(f"{what} reads images with Pillow, which is not installed: "
                                 "pip install 'intelrt[vision]'")


def explain_missing(what: str, exc: BaseException) -> ConfigurationError | None:
    """A :class:`ConfigurationError` naming the package ``exc`` misses and the way to install it."""
    found = missing_package(exc)
    if found is None:
        return None
    package, how = found
    return ConfigurationError(f"{what} needs {package}, which is not installed ({type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0][:200]}): {how}")


@dataclass
class Processors:
    """The processors of one checkpoint directory, loaded on first use and kept."""

    source: str
    trust_remote_code: bool = False
    credentials: dict[str, Any] = field(default_factory=dict, repr=False)
    loaded: dict[str, Any] = field(default_factory=dict, repr=False)

    def component(self, name: str, required: bool = True) -> Any:
        """The component ``name`` (:data:`COMPONENTS`) from the checkpoint. ``required=False``:
        ``None`` when it does not load (the pipeline's rule for an optional component)."""
        if name not in self.loaded:
            self.loaded[name] = self._load(name)
        value = self.loaded[name]
        if isinstance(value, BaseException):
            if not required:
                return None
            raise explain_missing(f"the {name.replace('_', ' ')} of {self.source}", value) or ConfigurationError(
                f"the {name.replace('_', ' ')} of {self.source} does not load ({type(value).__name__}: "
                f"{str(value).strip()[:300]}); save it beside the model (save_pretrained)") from value
        return value

    def _load(self, name: str) -> Any:
        import transformers

        auto = getattr(transformers, AUTO_CLASSES[name])
        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code, **self.credentials}
        if name == "tokenizer":
            kwargs["use_fast"] = True  # transformers.pipeline's default
        try:
            value = auto.from_pretrained(self.source, **kwargs)
        except Exception as exc:  # noqa: BLE001 - kept: raised when the component is required
            log.debug("no %s for %s: %s", name, self.source, exc)
            return exc
        if name == "processor" and not isinstance(value, transformers.ProcessorMixin):
            # AutoProcessor falls back to a tokenizer or image processor; pipelines want a real processor
            return TypeError(f"{self.source} has no multimodal processor (AutoProcessor gives "
                             f"{type(value).__name__})")
        return value

    def main(self, tokenizer: Any = None) -> Any:
        """What prepares this model's inputs: its multimodal processor, else its image processor
        or feature extractor, else ``tokenizer``."""
        for name in ("processor", "image_processor", "feature_extractor"):
            value = self.component(name, required=False)
            if value is not None:
                return value
        return tokenizer


def pipeline_components(pipeline_class: Any, processors: Processors, tokenizer: Any) -> dict[str, Any]:
    """The component keywords for ``transformers.pipeline(task, model=<object>, …)``: each one the
    pipeline class reads, loaded from the checkpoint (``tokenizer``: the one ``load`` loaded)."""
    components: dict[str, Any] = {}
    for name in COMPONENTS:
        flag = getattr(pipeline_class, f"_load_{name}", None)
        if flag is False:
            continue
        if name == "tokenizer" and tokenizer is not None:
            components[name] = tokenizer
            continue
        value = processors.component(name, required=bool(flag))
        if value is not None:
            components[name] = value
    return components
