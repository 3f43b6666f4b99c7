"""The MMEngine model of xmr: frozen towers + target-language branch + optional disentangler."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from xmr.datasets.languages import normalize_language, normalize_languages
from xmr.models.adapters.grouped import LanguageMembership
from xmr.models.adapters.language_adapters import TOWER_WEIGHTS, adapter_types
from xmr.models.backbones.base import VisionLanguageBackbone, configured_tower_shape
from xmr.models.disentanglers.base import (
    ConditionDisentangler,
    build_disentangler,
    disentangler_class,
)
from xmr.models.disentanglers.per_language import PerLanguageDisentangler
from xmr.models.language.carried_vocabulary import carried_entry
from xmr.models.language.tokenizers import SentencePieceTokenizer, TokenBatch
from xmr.models.language.tower_embedding import check_tower_tokenizer
from xmr.models.retrievers.base import (
    DISENTANGLER_SCALE,
    BaseRetriever,
    feature_rows,
    gallery_batch,
    unit_rows,
)
from xmr.registry import MODELS

#: The language the frozen text tower reads unless ``source_language`` says otherwise.
SOURCE_LANGUAGE = 'en'
#: Names a phase's ``trainable`` may use for groups of modules (see ``trainable_groups``).
TARGET_GROUP = 'target'
#: The losses that read media embeddings, which a text-only backbone cannot give.
MEDIA_LOSSES = ('source_cm', 'cm')
#: ``pad_to_multiple_of`` of a compiled model's tokenizers, unless their configs set one:
#: CLIP's 77-token captions then come in at most 10 widths, each one CUDA graph.
COMPILED_PAD_MULTIPLE = 8


def canonical_source(source_language: str) -> str:
    """``source_language`` canonical, as the branch's languages and the datasets' are: ``eng``
    must match ``en``."""
    return normalize_language(source_language, 'CrossLingualRetriever source_language')


def check_read_languages(languages: Sequence[str], source_language: str,
                         targets: Sequence[str], where: str) -> None:
    """Fail unless every language is the source language or one of the ``targets`` (codes as
    :func:`~xmr.datasets.languages.normalize_language` gives them).

    Raises:
        ValueError: naming ``where``, the languages without adapters and those read.
    """
    missing = [lang for lang in languages if lang != source_language and lang not in targets]
    if missing:
        raise ValueError(f'{where}: the model has no adapters for {missing}; it reads '
                         f'{[source_language, *targets]}')


def _branch_class(cfg: Any) -> Any:
    """The class a ``language_branch`` config builds (``None`` for no config)."""
    kind = cfg.get('type') if isinstance(cfg, Mapping) else None
    return MODELS.get(kind) if isinstance(kind, str) else kind


#: Phases a compiled model may train, each compiling its losses anew: DASD's three.
COMPILED_PHASES = 3


@MODELS.register_module()
class CrossLingualRetriever(BaseRetriever):
    """Teaches a frozen vision-language model new languages through a trainable branch.

    One training step (DESIGN "data flow"): frozen towers give ``r^S`` and ``r^V`` (or cached
    features); the embedding block embeds the target caption; the disentangler, if any, turns it
    into a condition and its losses; the branch runs the frozen blocks with the language's
    adapters into ``r^T``; the current phase's weighted losses are returned.

    A text-only backbone (a :class:`~xmr.models.backbones.base.TextBackbone` that is no
    :class:`VisionLanguageBackbone`, e.g. a sentence encoder) runs the cross-lingual losses alone;
    its galleries are text (``RetrievalMetric(protocol='text_to_text')``).

    Args:
        backbone: ``MODELS`` config of a :class:`~xmr.models.backbones.base.TextBackbone`
            (usually a :class:`VisionLanguageBackbone`).
        language_branch: config of :class:`TargetLanguageBranch` (the tower is filled in).
        disentangler: ``DISENTANGLERS`` config, or ``None``; ``per_language=True`` in it builds
            one per target language (DASD's #TP; :mod:`xmr.models.disentanglers.per_language`).
        losses: configs of ``source_cm``, ``cl`` and ``cm`` (defaults: InfoNCE τ=0.07 with a
            learned scale for fine-tuning the towers, MSE, InfoNCE τ=0.01).
        source_language: the language the frozen text tower reads, in any form
            :func:`~xmr.datasets.languages.normalize_language` accepts (``eng`` is ``en``).
        data_preprocessor: config of the preprocessor, or the options of
            :class:`RetrievalDataPreprocessor` (no ``type``).
        init_cfg: MMEngine init config.
        compile: ``torch.compile`` options for the training step's losses (forward and
            backward), e.g. ``dict(mode='reduce-overhead')`` to replay them as CUDA graphs;
            ``None``: eager. Needs a branch whose every site runs all languages in one call
            (DASD's dynamic adapters), so that the compiled code depends on which languages a
            batch holds, not on their mix; a per-language disentangler runs eagerly between
            the compiled parts (docs/benchmarks.md, "A compiled step"). The evaluation's
            encoding of captions (:meth:`encode_text`) is compiled too. The tokenizers then pad
            to multiples of :data:`COMPILED_PAD_MULTIPLE` tokens unless their configs say
            otherwise (``pad_to_multiple_of=1``: the longest caption).
    """

    LOSSES = {
        'source_cm': 'InfoNCE between English captions and media while fine-tuning the towers',
        'cl': 'L_CL: alignment of r^T to the frozen r^S (cross-lingual phase)',
        'cm': 'L_CM: InfoNCE between r^T and r^V (cross-modal phase)',
    }
    #: What ``compile`` compiles: each attribute the model calls and the method it holds.
    COMPILED: Mapping[str, str] = {'_losses': '_phase_losses',
                                   '_source_embeddings': 'encode_source',
                                   '_target_embeddings': '_embed_target'}
    #: ``compile``'s options go to ``torch.compile``: checked as the config loads
    #: (:func:`~xmr.registry.check_part_options`).
    option_dicts: ClassVar[Mapping[str, tuple[Callable, tuple[str, ...]]]] = {
        **BaseRetriever.option_dicts, 'compile': (torch.compile, ('model',))}
    #: The losses built unless ``losses`` replaces them by name.
    DEFAULT_LOSSES: Mapping[str, dict] = {
        'source_cm': dict(type='InfoNCELoss', temperature=0.07, learnable=True),
        'cl': dict(type='AlignmentLoss', kind='mse'),
        'cm': dict(type='InfoNCELoss', temperature=0.01),
    }

    def __init__(self, backbone: dict, language_branch: dict | None = None,
                 disentangler: dict | None = None, losses: Mapping[str, dict] | None = None,
                 source_language: str = SOURCE_LANGUAGE, data_preprocessor: dict | None = None,
                 init_cfg: dict | None = None, compile: dict | None = None) -> None:
        super().__init__(data_preprocessor, init_cfg)
        # Before the backbone, whose weights may take minutes to load.
        self.check_config(dict(backbone=backbone, language_branch=language_branch,
                               disentangler=disentangler, source_language=source_language))
        self.backbone = self.build_backbone(backbone)
        source_language = canonical_source(source_language)
        self.source_language = source_language
        tower = self.backbone.text_tower
        self.language_branch = None
        if language_branch is not None:
            self.language_branch = MODELS.build(language_branch, default_args=dict(tower=tower))
            if getattr(self.language_branch.embedding, 'reads_tower', False):
                check_tower_tokenizer(self.backbone.tokenizer, self.language_branch.tokenizer)
        if disentangler is not None:
            self.disentangler = self._build_disentangler(dict(disentangler), tower)
        self.build_losses({**self.DEFAULT_LOSSES, **(losses or {})})
        reads_media = isinstance(self.backbone, VisionLanguageBackbone)
        self.data_preprocessor.bind(
            self.backbone.tokenizer,
            self.language_branch.tokenizer if self.language_branch is not None else None,
            self.backbone.image_mean if reads_media else None,
            self.backbone.image_std if reads_media else None, source_language)
        self.phase = 'cross_lingual'
        self.loss_weights: dict[str, float] = {'cl': 1.0}
        self.compile_options = self._check_compile(compile)
        if self.compile_options is not None:
            for tokenizer in (self.backbone.tokenizer, self.language_branch.tokenizer):
                if tokenizer.pad_to is None and tokenizer.pad_to_multiple_of is None:
                    tokenizer.pad_to_multiple_of = COMPILED_PAD_MULTIPLE
        self._compile()

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Refuse, from the config alone, a source language among the targets and a
        disentangler the model's other parts cannot run: at the config's load
        (:func:`~xmr.registry.check_part_options`), before the runner makes the work dir, and in
        ``__init__`` before the backbone is built.

        Args:
            cfg: the model's config; its ``language_branch``, ``disentangler`` and
                ``source_language`` are read.

        Where the backbone's config gives its text tower's width and depth
        (:meth:`~xmr.models.backbones.base.TextBackbone.text_tower_shape`: open_clip's
        ``model_cfg`` or ``arch``, CCLM, M-CLIP), the branch's and the disentangler's options
        are checked against them too (their ``check_tower``), with the messages of their build.

        Raises:
            ValueError: the source language among the branch's ``languages`` (in any form:
                ``eng`` is ``en``); an adapter that reads a condition (``DynamicAdapter``)
                without a disentangler; a disentangler without a ``language_branch``, or one whose
                class refuses the branch's adapter types (DASD's SDM with no adapter that reads
                ``W^z``: :meth:`ConditionDisentangler.check_adapter_types`) or their options
                (dynamic adapters of another width than ``W^z``:
                :meth:`ConditionDisentangler.check_adapter_configs`) or the branch's tokenizer
                (the SDM's ``padding_as_tokens`` without a fixed ``pad_to``, on a tower
                the config does not give a fixed context:
                :meth:`ConditionDisentangler.check_tokenizer_config`); an option beyond
                the tower (:meth:`TargetLanguageBranch.check_tower
                <xmr.models.language.branch.TargetLanguageBranch.check_tower>`,
                :meth:`ConditionDisentangler.check_tower`).
            TypeError: a disentangler that is no :class:`ConditionDisentangler`.
            LanguageCodeError: a code no form of which is known, named by its option.
        """
        super().check_config(cfg)
        disentangler, branch = cfg.get('disentangler'), cfg.get('language_branch')
        tower = configured_tower_shape(cfg.get('backbone'))
        if isinstance(branch, Mapping) and branch.get('languages') is not None:
            source = canonical_source(cfg.get('source_language', SOURCE_LANGUAGE))
            if source in normalize_languages(branch['languages'],
                                             'TargetLanguageBranch languages'):
                raise ValueError(f"source language '{source}' is read by the frozen tower; it "
                                 'cannot also be a target language')
        check_tower = getattr(_branch_class(branch), 'check_tower', None)
        if tower is not None and check_tower is not None:
            check_tower(branch, tower)
        types = adapter_types(branch.get('adapters')) if isinstance(branch, Mapping) else None
        if disentangler is None:
            conditioned = [kind.__name__ for kind in types or () if kind.reads_condition]
            if conditioned:
                # Its first batch, the closing validation of a phase before alignment, said so.
                raise ValueError(f'adapter {conditioned[0]} reads a per-caption condition '
                                 "(DASD's W^z) that only a disentangler makes: configure "
                                 "model.disentangler (type='SemanticsDisentangler'), or take "
                                 'an adapter that reads none (StaticAdapter)')
            return
        if branch is None:
            raise ValueError('a disentangler needs a language_branch to condition')
        kind = disentangler_class(disentangler, ConditionDisentangler, cls.__name__)
        if types is not None:
            kind.check_adapter_types(types)
        kind.check_adapter_configs(disentangler, branch.get('adapters'))
        kind.check_tokenizer_config(disentangler, branch.get('tokenizer'), tower)
        if tower is not None:
            kind.check_tower(disentangler, tower)

    def _check_compile(self, options: dict | None) -> dict | None:
        """``compile``'s options (``{}``: torch.compile's defaults), or a ``ValueError`` naming
        what a compiled step cannot hold."""
        if options is None:
            return None
        branch = self.language_branch
        if branch is None or not branch.adapters.groups_every_site(branch.languages):
            raise ValueError('compile needs a language branch whose every adapter site runs all '
                             "languages in one call (GroupedAdapter: DASD's DynamicAdapter); "
                             'other adapters sort each batch by language, so the compiled code '
                             'would change with every mix of languages: drop compile')
        return dict(options)

    def _compile(self) -> None:
        """Compile the training losses and the evaluation's encoders, or bind them eager."""
        options = self.compile_options
        # Dynamo keeps recompile_limit versions of a function and runs it eagerly past them.
        # The losses are guarded on a one-language batch's language (the shipped batches) and
        # on the phase's losses: each phase makes one version per language, and one for mixed
        # batches; the first, one more with dynamic widths (evaluation: one per language).
        needed = COMPILED_PHASES * (len(self.languages) + 2)
        if options is not None and torch._dynamo.config.recompile_limit < needed:
            torch._dynamo.config.recompile_limit = needed
        for name, method in self.COMPILED.items():
            function = getattr(self, method)
            setattr(self, name, function if options is None
                    else torch.compile(function, **options))

    def __getstate__(self) -> dict[str, Any]:
        # A compiled function is bound to this instance: a copy compiles its own.
        state = self.__dict__.copy()
        for name in self.COMPILED:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._compile()

    def _build_disentangler(self, cfg: dict, tower: nn.Module) -> ConditionDisentangler:
        """The disentangler, or with ``per_language=True`` in its config one copy per target
        language (:class:`PerLanguageDisentangler`, DASD's #TP)."""
        per_language = cfg.pop('per_language', False)
        default_args = dict(tower=tower,
                            condition_blocks=self.language_branch.adapters.condition_blocks())
        if not per_language:
            return build_disentangler(cfg, ConditionDisentangler, type(self).__name__,
                                      **default_args)
        return PerLanguageDisentangler({
            lang: build_disentangler(cfg, ConditionDisentangler, type(self).__name__,
                                     **default_args)
            for lang in self.language_branch.languages})

    # ----------------------------------------------------------------------------- phases
    @property
    def languages(self) -> list[str]:
        """Target languages the model was built for."""
        return [] if self.language_branch is None else list(self.language_branch.languages)

    def read_languages(self) -> list[str]:
        """The source language, then the target languages."""
        return [self.source_language, *self.languages]

    LANGUAGE_KEYS = 'source_language and model.language_branch.languages'

    @classmethod
    def configured_languages(cls, cfg: Mapping[str, Any]) -> list[str] | None:
        """The config's source language, then its branch's ``languages``; ``None`` where a
        branch names none (a class of its own may default them)."""
        branch = cfg.get('language_branch')
        targets = [] if branch is None else (branch.get('languages')
                                             if isinstance(branch, Mapping) else None)
        if targets is None:
            return None
        source = canonical_source(cfg.get('source_language', SOURCE_LANGUAGE))
        return [source, *normalize_languages(targets, 'model.language_branch.languages')]

    @classmethod
    def check_read(cls, languages: Sequence[str], read: Sequence[str], where: str) -> None:
        """:func:`check_read_languages`: the first language read is the source one."""
        check_read_languages(languages, read[0], list(read[1:]), where)

    @classmethod
    def check_module_languages(cls, languages: Sequence[str], read: Sequence[str],
                               where: str) -> None:
        """The source language (``read[0]``) is refused: its frozen tower reads it unchanged.

        Raises:
            ValueError: naming ``where``, the source language and the targets to give.
        """
        if read[0] in languages:
            raise ValueError(f"{where}: '{read[0]}' is the model's source language, read by its "
                             'frozen tower with no module of its own; give one of its target '
                             f'languages {list(read[1:])}')

    def check_languages(self, languages: Sequence[str], where: str) -> None:
        """Fail unless the model reads every language: its source one or one it has adapters for.

        Args:
            languages: languages of captions or queries.
            where: what holds them (``'query'``, ``'val dataset xtd10 (path)'``), for the message.

        Raises:
            ValueError: naming ``where``, the languages without adapters and those the model reads.
        """
        check_read_languages(languages, self.source_language, self.languages, where)

    def trainable_groups(self) -> dict[str, list[str]]:
        """Groups a phase's ``trainable`` may name: ``target`` is the language branch plus the
        disentangler when the model has one."""
        target = ['language_branch'] if self.language_branch is not None else []
        if self.disentangler is not None:
            target.append('disentangler')
        return {TARGET_GROUP: target}

    def check_phase(self, name: str, loss_weights: Mapping[str, float]) -> dict[str, float]:
        """The base's check; every loss but ``source_cm`` also needs the language branch, and
        the media losses an image tower.

        Raises:
            ValueError: a phase weighing target-language losses on a model without a branch,
                or media losses on a text-only backbone.
        """
        weights = super().check_phase(name, loss_weights)
        if self.language_branch is None and set(weights) - {'source_cm'}:
            raise ValueError(f'phase {name} weights {sorted(weights)} need a language_branch')
        media_losses = sorted(set(weights) & set(MEDIA_LOSSES))
        if media_losses and not isinstance(self.backbone, VisionLanguageBackbone):
            raise ValueError(f'phase {name} weights {media_losses}, which compare with media, '
                             f'but {type(self.backbone).__name__} is a text-only backbone: drop '
                             'the phase or set those weights to 0 (its alignment is cl alone)')
        return weights

    # ----------------------------------------------------------------------------- encoders
    def encode_source(self, tokens: TokenBatch) -> torch.Tensor:
        with self.frozen_tower():
            return self.backbone.encode_source_text(tokens)

    def encode_media(self, media: torch.Tensor) -> torch.Tensor:
        if not isinstance(self.backbone, VisionLanguageBackbone):
            raise TypeError(f'{type(self.backbone).__name__} is a text-only backbone: it embeds '
                            "no media; evaluate it with RetrievalMetric(protocol='text_to_text')")
        with self.frozen_tower():
            return self.backbone.encode_media(media)

    def encode_target(self, tokens: TokenBatch, langs: Sequence[str],
                      r_source: torch.Tensor | None = None,
                      membership: LanguageMembership | None = None
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Target captions -> ``r^T`` ``[B, E]`` and the disentangler's losses.

        Args:
            tokens: target tokens.
            langs: language of each caption.
            r_source: ``[B, E]`` teacher embeddings of the paired source captions (training);
                without them the disentangler computes only the condition.
            membership: the branch's
                :meth:`~xmr.models.language.branch.TargetLanguageBranch.membership` of
                ``langs``, when made beforehand.
        """
        if self.language_branch is None:
            raise ValueError('this model has no target-language branch')
        tokens = self.language_branch.read(tokens)
        embeddings = self.language_branch.embed(tokens)
        condition, losses = None, {}
        if self.disentangler is not None:
            # Passed on, not read here: compiled code reading the codes would depend on them.
            condition, losses = (
                self.disentangler(embeddings, tokens, r_source=r_source, langs=langs)
                if self.disentangler.reads_languages
                else self.disentangler(embeddings, tokens, r_source=r_source))
        return (self.language_branch.encode(embeddings, tokens, langs, condition, membership),
                losses)

    def encode_text(self, tokens: TokenBatch, lang: str) -> torch.Tensor:
        """Captions of one language -> ``[B, E]`` unnormalised embeddings.

        The frozen tower reads the source language, the target branch a trained target language.

        Raises:
            ValueError: for a language without adapters, listing those the model reads.
        """
        if lang == self.source_language:
            return self._source_embeddings(tokens)
        self.check_languages([lang], 'query')
        langs = [lang] * tokens['input_ids'].shape[0]
        # Compiled, the branch reads the language as a membership (each site grouped, checked
        # at build): the compiled code then depends on the language, not on the batch's size.
        membership = (None if self.compile_options is None
                      else LanguageMembership(langs, tokens['input_ids'].device))
        return self._target_embeddings(tokens, langs, membership)

    def _embed_target(self, tokens: TokenBatch, langs: Sequence[str],
                      membership: LanguageMembership | None) -> torch.Tensor:
        """:meth:`encode_text` of target captions, ``[B, E]``: what ``compile`` compiles for
        evaluation."""
        return self.encode_target(tokens, langs, membership=membership)[0]

    # ----------------------------------------------------------------------------- modes
    def loss(self, media: torch.Tensor | None = None, source_tokens: TokenBatch | None = None,
             target_tokens: TokenBatch | None = None, langs: Sequence[str] | None = None,
             source_features: torch.Tensor | None = None,
             media_features: torch.Tensor | None = None,
             media_keys: torch.Tensor | None = None, **_: Any) -> dict[str, torch.Tensor]:
        """The current phase's weighted losses, ``{'loss_<name>': scalar}``.

        ``source_features`` / ``media_features`` (``[B, E]``, or ``B`` rows ``[E]`` as collated
        from a ``CachedFeatureDataset``) replace the frozen towers' forward passes when present.
        Contrastive losses see the whole global batch under DDP (``gather_with_grad``), and
        those that mask the other captions of a medium the batch's ``media_keys`` (int64 ``[B]``).
        """
        source_features, media_features = map(feature_rows, (source_features, media_features))
        membership = (None if langs is None or self.language_branch is None or target_tokens is None
                      else self.language_branch.membership(langs,
                                                           target_tokens['input_ids'].device))
        # Only a loss that masks reads the keys; compiled code then takes no input it ignores.
        if not any(getattr(loss, 'mask_same_media', False) for loss in self.losses.values()):
            media_keys = None
        return self._losses(media, source_tokens, target_tokens, langs, membership,
                            source_features, media_features, media_keys)

    def _phase_losses(self, media: torch.Tensor | None, source_tokens: TokenBatch | None,
                      target_tokens: TokenBatch | None, langs: Sequence[str] | None,
                      membership: LanguageMembership | None,
                      source_features: torch.Tensor | None,
                      media_features: torch.Tensor | None,
                      media_keys: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """:meth:`loss` once the batch's languages are a membership: what ``compile`` compiles
        (it reads ``langs`` only where the membership is ``None``)."""
        weights = self.loss_weights
        losses: dict[str, torch.Tensor] = {}
        # One membership test per name: compiled code guards on each (a set's intersection with
        # the keys left guards out, and code compiled for one phase ran in the next).
        needs_media = any(name in weights for name in ('source_cm', 'cm'))
        needs_source = any(name in weights for name in ('source_cm', 'cl', DISENTANGLER_SCALE))
        r_source = source_features
        if needs_source and r_source is None:
            r_source = self.encode_source(self._require(source_tokens, 'source_text'))
        r_media = media_features
        if needs_media and r_media is None:
            r_media = self.encode_media(self._require(media, 'media'))
        if 'source_cm' in weights:
            losses['loss_source_cm'] = self.pair_loss('source_cm', r_source, r_media,
                                                       media_keys)
        if any(name != 'source_cm' for name in weights):
            tokens = self._require(target_tokens, 'target_text')
            # The SDM's losses only where the phase weighs them: given r^S it computes them
            # (one more pass of its blocks, the discriminator), which a weight of 0 drops.
            r_target, extra = self.encode_target(
                tokens, langs, r_source if DISENTANGLER_SCALE in weights else None, membership)
            if 'cl' in weights:
                losses['loss_cl'] = self.pair_loss('cl', r_target, r_source, media_keys)
            if 'cm' in weights:
                losses['loss_cm'] = self.pair_loss('cm', r_target, r_media, media_keys)
            losses.update(self.disentangler_losses(
                {f'loss_{name}': value for name, value in extra.items()}))
        return losses

    @staticmethod
    def _require(value: Any, key: str) -> Any:
        if value is None:
            raise ValueError(f"this phase's losses need '{key}' in every batch")
        return value

    @torch.no_grad()
    def predict(self, media: torch.Tensor | None = None,
                caption_tokens: Mapping[str, tuple[TokenBatch, torch.Tensor]] | None = None,
                media_ids: Sequence[str] | None = None, indices: Sequence[int] | None = None,
                media_features: torch.Tensor | None = None, **_: Any) -> list[dict[str, Any]]:
        """Embed a gallery batch and its captions in every language.

        A batch without media (a text-only annotation, ``with_media=False``) gives items
        without ``media_embedding``, scored by text-to-text protocols.

        Returns:
            One dict per item: ``media_id``, its dataset ``index`` when given,
            ``media_embedding`` ``[E]`` (when the batch has media) and ``caption_embeddings``
            ``{lang: [n, E]}``, all L2-normalised float32 on CPU, copied there at once
            (:func:`~xmr.models.retrievers.base.gallery_batch`).
        """
        r_media = feature_rows(media_features)
        if r_media is None and media is not None:
            r_media = self.encode_media(media)
        captions = {lang: (unit_rows(self.encode_text(tokens, lang)), owner)
                    for lang, (tokens, owner) in (caption_tokens or {}).items()}
        return gallery_batch(None if r_media is None else unit_rows(r_media), captions,
                             media_ids, indices)

    # ----------------------------------------------------------------------------- checkpoints
    def checkpoint_facts(self) -> dict[str, Any]:
        """The base's facts plus the backbone's architecture, the source language, the
        adapters' types, the settings they compute with that no weight holds
        (:meth:`~xmr.models.adapters.language_adapters.LanguageAdapters.settings`:
        ``[{'scale': 16.0, 'type': 'LoRA'}]``) and the target tokenizer's vocabulary (its
        digest)."""
        branch = self.language_branch
        adapters = sorted({type(adapter).__name__ for placed in branch.adapters.sets.values()
                           for site, adapter in placed.items() if site != TOWER_WEIGHTS}
                          ) if branch is not None else []
        return dict(super().checkpoint_facts(), arch=self.backbone.arch,
                    source_language=self.source_language, adapters=adapters,
                    adapter_settings=[] if branch is None else branch.adapters.settings(),
                    target_vocabulary=None if branch is None
                    else branch.tokenizer.vocabulary_digest())

    def get_extra_state(self) -> dict[str, Any]:
        """The facts, and a SentencePiece target tokenizer's model, which no other file may
        hold (:mod:`~xmr.models.language.carried_vocabulary`); the facts alone are compared."""
        tokenizer = None if self.language_branch is None else self.language_branch.tokenizer
        carried = carried_entry(tokenizer.vocabulary()) if isinstance(
            tokenizer, SentencePieceTokenizer) else {}
        return dict(super().get_extra_state(), **carried)
