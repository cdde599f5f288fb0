"""Every slide of a lesson checked when the file is opened, against the models this server has: its
checkpoint is shipped and loads, its prompt encodes, and its layer, head, position and highlight
exist in that model and prompt (or in the worked example's few tokens). A slide asking for layer 9
of a 4-layer model used to be drawn as layer 3 under a title saying 9; now the file is refused with
the line of the slide that asks."""

from __future__ import annotations

from ..analysis import worked
from ..errors import GptvizError, UnknownCharacterError
from ..lessons import Lesson, LessonError, Slide, content
from ..tokenizers import encode_prompt
from . import caches, sources
from .caches import ModelKey, SAEKey
from .features import sae_for, spec_vector
from .saes import sae_version, shipped_path, shipped_saes
from .state import PRESET_PROMPT

# the worked examples' sizes: tokens of the heatmap a highlight frames (None: no heatmap)
TOY_TOKENS = {"tiny-head": len(content.TOY_TOKENS), "mask": len(worked.SUPPORT_TOKENS) + 1, "softmax": None}


def slide_checkpoint(slide: Slide) -> str:
    """The checkpoint a real-model slide runs: its own, else the dashboard's default."""
    return slide.checkpoint or sources.default_checkpoint()


def slide_prompt(slide: Slide, name: str) -> str:
    """The prompt a real-model slide runs: its own, else its checkpoint's preset, else the default."""
    return slide.prompt or sources.preset_prompt(name) or PRESET_PROMPT


def slide_sae_name(slide: Slide, name: str) -> str | None:
    """The name of the SAE a slide reads (a features slide, or one steering with a feature): its `sae`
    shipped beside its checkpoint, else that checkpoint's first; None when it reads none or none is shipped."""
    if slide.page != "features" and (slide.steer is None or slide.steer.kind != "feature"):
        return None
    names = shipped_saes(name)
    sae = slide.sae or (names[0] if names else None)
    return sae if sae in names else None


def slide_sae(slide: Slide, name: str) -> SAEKey | None:
    """The SAE a slide reads (slide_sae_name), as the key that loads it."""
    sae = slide_sae_name(slide, name)
    if sae is None:
        return None
    path = shipped_path(name, sae)
    return SAEKey(path, version=sae_version(path))


def _reads(where: str, slide: Slide, key: ModelKey) -> None:
    """LessonError unless the slide's SAE is shipped, loads and fits, its feature exists, and its
    steering vector can be built on its model."""
    sae_key = slide_sae(slide, key.source)
    if sae_key is None and (slide.page == "features" or (slide.steer and slide.steer.kind == "feature")):
        names = ", ".join(shipped_saes(key.source)) or "none"
        asked = f"SAE {slide.sae!r}" if slide.sae else "an SAE"
        raise LessonError(f"{where}: checkpoint {key.source!r} ships no {asked}; shipped SAEs: {names}"[:300])
    sae = sae_for(key, sae_key) if sae_key is not None else None
    if isinstance(sae, str):
        raise LessonError(f"{where}: {sae.splitlines()[0][:240]}")
    if sae is not None and slide.feature is not None:
        _in(where, "feature", slide.feature, sae.d_sae, "features", f"SAE {slide.sae or 'shipped'}")
    if slide.steer is not None:
        try:
            spec_vector(key, slide.steer, sae_key if slide.steer.kind == "feature" else None)
        except GptvizError as e:
            raise LessonError(f"{where}: 'steer': {str(e).splitlines()[0][:240]}") from None


def _in(where: str, what: str, value: int, n: int, noun: str, of: str) -> None:
    if not 0 <= value < n:
        raise LessonError(f"{where}: {what} {value} does not exist: {of} has {n} {noun} (0 to {n - 1})"[:300])


def _model(where: str, slide: Slide) -> tuple[int, int, int, str]:
    """(layers, heads, tokens of the prompt, name) of a real-model slide, or LessonError."""
    name = slide_checkpoint(slide)
    if name not in (*sources.shipped(), sources.DEMO):
        shipped = ", ".join(sources.shipped()) or "none"
        raise LessonError(f"{where}: checkpoint {name[:80]!r} is not shipped with this server; shipped: {shipped}")
    try:
        bundle = caches.bundle_for(ModelKey(name, "cpu", sources.version(name)))
        if bundle.tokenizer is None:
            raise LessonError(f"{where}: checkpoint {name!r} has no tokenizer, so a slide cannot give it a prompt")
        cfg = bundle.model.config
        ids = encode_prompt(bundle.tokenizer, slide_prompt(slide, name), cfg.block_size, keep_last=True)
    except LessonError:
        raise
    except UnknownCharacterError as e:  # its own advice (unknown='drop') is for code: a lesson has no such key
        shown = ", ".join(repr(c) for c in e.chars[:8])
        raise LessonError(
            f"{where}: the prompt has characters {name!r} cannot read ({shown}): change the prompt"
        ) from None
    except GptvizError as e:
        raise LessonError(f"{where}: {str(e).splitlines()[0][:240]}") from None
    _reads(where, slide, ModelKey(name, "cpu", sources.version(name)))
    return cfg.n_layer, cfg.n_head, len(ids), f"checkpoint {name!r}"


def check_slide(where: str, slide: Slide) -> None:
    """LessonError (naming where) if the slide asks for what its model or worked example lacks."""
    tokens: int | None  # None: the page draws no heatmap (TOY_TOKENS)
    if content.real_model(slide):
        layers, heads, tokens, of = _model(where, slide)
    else:
        layers = heads = 1  # a worked example is one head
        tokens, of = TOY_TOKENS[slide.page], f"the worked {slide.page} example"
        if slide.numbers is not None:
            tokens, of = slide.numbers.tokens, "your own X"
    _in(where, "layer", slide.layer, layers, "layers", of)
    _in(where, "head", slide.head, heads, "heads per layer", of)
    what = f"a {slide.page} slide"
    if slide.page == "predict" or slide.step not in (None, "weights"):  # no attention heatmap to frame
        tokens, what = None, f"a {slide.page} slide" + (f" at step {slide.step!r}" if slide.step else "")
    if tokens is None:
        if slide.highlight is not None or slide.position is not None:
            raise LessonError(f"{where}: {what} draws no heatmap; remove 'highlight' and 'position'")
        return
    if content.real_model(slide):
        of += " on its prompt"
    if slide.position is not None:
        _in(where, "position", slide.position, tokens, "tokens", of)
    if slide.highlight is not None:
        for at in slide.highlight.at:
            _in(where, f"highlight {slide.highlight.kind}", at, tokens, "tokens", of)


def check_lesson(lesson: Lesson) -> None:
    """Every slide checked (check_slide); the first problem as LessonError naming its line."""
    for i, slide in enumerate(lesson.slides):
        try:
            check_slide(lesson.where(i), slide)
        except LessonError as e:  # named by the line of the key it is about
            raise LessonError(f"{lesson.name}: {lesson.at_key(i, str(e))}") from None
