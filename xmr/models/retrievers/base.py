"""The one base of xmr's retrievers (mmpretrain's ``BaseClassifier`` shape).

A retriever declares the losses it computes (:attr:`BaseRetriever.LOSSES`) and implements
:meth:`~BaseRetriever.loss`, :meth:`~BaseRetriever.predict` and
:meth:`~BaseRetriever.checkpoint_facts`. The base owns what every retriever shares: the mode
dispatch MMEngine calls, building the declared losses, the phases ``PhasedTrainLoop`` selects
(``check_phase`` / ``set_phase``, the disentangler's losses scaled as one group), the frozen-tower
gradient context, checkpoint facts as extra state, losses logged as the mean over DDP ranks, and
the per-item dicts :class:`~xmr.evaluation.RetrievalMetric` reads.
"""
from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from mmengine import dist
from mmengine.model import BaseModel
from torch import nn

from xmr.datasets.collate import kept_no_item
from xmr.models.backbones.base import (
    TextBackbone,
    VisionLanguageBackbone,
    check_interface,
    check_tokenizer_fits,
)
from xmr.models.data_preprocessor import RetrievalDataPreprocessor
from xmr.models.losses.distributed import gather_with_grad
from xmr.models.losses.pair import PairLoss
from xmr.models.retrievers.checkpoint_facts import check_checkpoint_facts, store_facts_as_tensor
from xmr.registry import MODELS
from xmr.utils.cli import UserKeyError

if TYPE_CHECKING:  # evaluation's scoring imports no model
    from xmr.evaluation.token_scoring import TokenScore

__all__ = ['BaseRetriever', 'DISENTANGLER_SCALE', 'attach_captions', 'feature_rows',
           'gallery_batch', 'gallery_items', 'unit_rows']

#: The phase weight that scales every loss the disentangler returns (each already weighted by
#: the disentangler's own settings, e.g. DASD's lambda_1 and lambda_2, CDDS's alphas); without a
#: disentangler it has nothing to scale, so one schedule serves models with and without one.
DISENTANGLER_SCALE = 'disentangler'


class BaseRetriever(BaseModel, metaclass=ABCMeta):
    """What every xmr retriever shares; subclasses state their losses and their computation.

    Attributes:
        LOSSES: ``{name: what it computes}``, the losses the subclass may build under
            ``losses`` and a phase may weigh (besides :data:`DISENTANGLER_SCALE`).
        backbone: the :class:`~xmr.models.backbones.base.TextBackbone` (usually a
            :class:`~xmr.models.backbones.base.VisionLanguageBackbone`; set by the subclass).
        disentangler: the subclass's disentangler, or ``None``.
        languages: the languages whose texts it embeds (set by the subclass; read by
            :meth:`read_languages` and saved with each checkpoint).
        losses: the built losses, ``{name: module}``.
        phase / loss_weights: the phase :meth:`loss` runs and its non-zero weights.

    Args:
        data_preprocessor: config of the preprocessor; without a ``type``, the options of
            the one this retriever's batches need (:meth:`preprocessor_type`);
            ``None`` builds that one.
        init_cfg: MMEngine init config.
    """

    LOSSES: ClassVar[Mapping[str, str]] = {}
    #: ``data_preprocessor`` without a ``type`` goes to the preprocessor this retriever's
    #: batches need: its options are checked as the config loads
    #: (:func:`~xmr.registry.check_part_options`).
    option_dicts: ClassVar[Mapping[str, tuple[Callable, tuple[str, ...]]]] = {
        'data_preprocessor': (RetrievalDataPreprocessor, ())}

    def __init__(self, data_preprocessor: dict | None = None,
                 init_cfg: dict | None = None) -> None:
        # A config may give the preprocessor's options alone; the retriever knows its type.
        kind = self.preprocessor_type()
        preprocessor = MODELS.build({'type': kind, **(data_preprocessor or {})})
        super().__init__(data_preprocessor=preprocessor, init_cfg=init_cfg)
        self.disentangler: nn.Module | None = None
        self.losses = nn.ModuleDict()
        self.phase, self.loss_weights = '', {}
        store_facts_as_tensor(self)

    @classmethod
    def preprocessor_type(cls) -> Callable:
        """The preprocessor a ``data_preprocessor`` without a ``type`` builds: the nearest
        class's ``option_dicts['data_preprocessor']``, so that a user's retriever declaring
        ``option_dicts`` of its own options alone keeps its base's."""
        return next(vars(base)['option_dicts']['data_preprocessor'][0] for base in cls.__mro__
                    if 'data_preprocessor' in vars(base).get('option_dicts', {}))

    def build_backbone(self, cfg: dict, source_language: str = 'en') -> TextBackbone:
        """Build the backbone of ``cfg`` (a ``MODELS`` config), check that its source
        tokenizer fits its text tower, and bind the data preprocessor to that tokenizer, for
        captions in ``source_language``, and to its image statistics (a retriever with a
        target-language tokenizer binds again with it).

        Checked here, not only by each backbone: a backbone from a user's own code that does not
        call :func:`~xmr.models.backbones.base.check_tokenizer_fits` would otherwise run until
        the first caption longer than the tower's context, or with an id beyond its table.

        Raises:
            TypeError: a backbone that is not a :class:`~xmr.models.backbones.base.TextBackbone`
                (no text tower and tokenizer to check or to adapt).
            UserError: one that sets no ``text_tower``, ``tokenizer``, ``embed_dim`` (and, for
                a :class:`~xmr.models.backbones.base.VisionLanguageBackbone`, ``image_size``,
                ``image_mean``, ``image_std``), or whose tower lacks an attribute
                :class:`~xmr.models.backbones.base.TextTower` lists.
            ValueError: the tokenizer's ids, length or padding do not fit the tower (both
                numbers named, with the backbone's ``arch`` or class).
        """
        backbone = MODELS.build(cfg)
        if not isinstance(backbone, TextBackbone):
            raise TypeError(f'{type(self).__name__}: backbone {type(backbone).__name__} is not a '
                            'TextBackbone (xmr.models.backbones.base), whose text_tower, '
                            'tokenizer and embed_dim a retriever reads; subclass it or '
                            'VisionLanguageBackbone (docs/custom_modules.md)')
        owner = getattr(backbone, 'arch', None) or type(backbone).__name__
        check_interface(backbone, VisionLanguageBackbone if isinstance(
            backbone, VisionLanguageBackbone) else TextBackbone, type(self).__name__)
        check_tokenizer_fits(backbone.tokenizer, backbone.text_tower, owner)
        reads_media = isinstance(backbone, VisionLanguageBackbone)
        self.data_preprocessor.bind(backbone.tokenizer, None,
                                    backbone.image_mean if reads_media else None,
                                    backbone.image_std if reads_media else None, source_language)
        return backbone

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Refuse, from the config alone, a loss this retriever does not compute
        (:meth:`check_loss_names`): at the config's load
        (:func:`~xmr.registry.check_part_options`), before the runner makes the work dir.
        Subclasses add their own checks and call this one."""
        if isinstance(cfg.get('losses'), Mapping):
            cls.check_loss_names(cfg['losses'])

    # ----------------------------------------------------------------------------- losses
    @classmethod
    def check_loss_names(cls, names: Iterable[str]) -> None:
        """Refuse names that are not :attr:`LOSSES`: their configs would be built and never
        computed.

        Raises:
            KeyError: naming the unknown losses, those this retriever computes and the way to
                a loss of another name.
        """
        unknown = set(names) - set(cls.LOSSES)
        if unknown:
            raise UserKeyError(f'{cls.__name__}: unknown losses {sorted(unknown)}; it computes '
                               f'{sorted(cls.LOSSES)}: a loss of another name needs a '
                               'retriever that computes it, a subclass whose LOSSES names it '
                               "(docs/custom_modules.md, 'A retriever')")

    def build_losses(self, cfgs: Mapping[str, dict],
                     default_args: Mapping[str, dict] | None = None) -> None:
        """Build ``{name: MODELS config}`` into :attr:`losses`, every name one of :attr:`LOSSES`
        (a :class:`PairLoss` that ``reads_backbone`` also gets the backbone).

        Raises:
            KeyError: naming the unknown losses and those this retriever computes
                (:meth:`check_loss_names`).
        """
        self.check_loss_names(cfgs)
        self.losses = nn.ModuleDict({
            name: MODELS.build(cfg, default_args=self._loss_default_args(
                cfg, (default_args or {}).get(name)))
            for name, cfg in cfgs.items()})

    def _loss_default_args(self, cfg: Mapping[str, Any], given: dict | None) -> dict | None:
        """``given``, plus the backbone for a :class:`PairLoss` that reads it."""
        loss_type = cfg['type'] if not isinstance(cfg['type'], str) else MODELS.get(cfg['type'])
        if isinstance(loss_type, type) and issubclass(loss_type, PairLoss) and \
                loss_type.reads_backbone:
            return dict(given or {}, backbone=self.backbone)
        return given

    def pair_loss(self, name: str, a: torch.Tensor, b: torch.Tensor,
                  media_keys: torch.Tensor | None = None) -> torch.Tensor:
        """The phase-weighted loss ``name`` between ``[B, E]`` pairs; a batch-contrastive
        :class:`PairLoss` sees the whole global batch under DDP, and one built with
        ``mask_same_media`` which pairs share a medium (from the batch's ``media_keys``,
        int64 ``[B]``).

        Raises:
            ValueError: a loss that masks the pairs of one medium, and a batch without
                ``media_keys`` (its items carry no ``media_id``).
        """
        loss, weight = self.losses[name], self.loss_weights[name]
        if not (isinstance(loss, PairLoss) and loss.batch_contrastive):
            return weight * loss(a, b)
        if not loss.mask_same_media:
            return weight * loss(*gather_with_grad(a, b))
        if media_keys is None:
            raise ValueError(f'loss {name} ({type(loss).__name__}, mask_same_media=True) tells '
                             "the captions of one medium by the batch's media_keys, and this "
                             "batch has none: its dataset's items carry no 'media_id'")
        a, b, media_keys = gather_with_grad(a, b, media_keys)
        return weight * loss(a, b, same_media=media_keys[:, None] == media_keys[None, :])

    def disentangler_losses(self, losses: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The disentangler's ``{'loss_<name>': term}`` scaled by the phase's
        :data:`DISENTANGLER_SCALE` weight (none when the phase switches them off)."""
        scale = self.loss_weights.get(DISENTANGLER_SCALE)
        return {} if scale is None else {name: scale * value for name, value in losses.items()}

    def parse_losses(self, losses: dict[str, torch.Tensor]
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """MMEngine's total loss, with the logged values averaged over the DDP ranks.

        Each rank's losses are of its own shard of the batch; the averaged gradients optimise
        their mean, so that mean is what the log shows (rank 0's shard alone is noisier and,
        for batch-contrastive losses such as ``L_CL``, a different quantity). The returned loss
        stays this rank's: backward needs its graph.
        """
        loss, log_vars = super().parse_losses(losses)
        values = torch.stack([value.detach().float() for value in log_vars.values()])
        dist.all_reduce(values, op='mean')
        return loss, dict(zip(log_vars, values))

    # ----------------------------------------------------------------------------- phases
    def loss_names(self) -> set[str]:
        """The losses this model computes: the built ones, and the disentangler's (one scaled
        group, :data:`DISENTANGLER_SCALE`) when it has one that computes any (CDDS's switches
        can turn every term off)."""
        return {*self.losses, *([DISENTANGLER_SCALE] if self.disentangler_computes() else [])}

    def disentangler_computes(self) -> bool:
        """Whether the model has a disentangler with a loss for :data:`DISENTANGLER_SCALE`."""
        return self.disentangler is not None and bool(self.disentangler.loss_names)

    def check_phase(self, name: str, loss_weights: Mapping[str, float]) -> dict[str, float]:
        """The phase's non-zero weights as floats, once the model can run them
        (``PhasedTrainLoop`` calls this for every phase when it is built, before anything
        trains). The disentangler's scale is dropped when there is no disentangler.

        Raises:
            KeyError: a weight of one of the disentangler's own losses (they belong to its
                config), or a name this model does not compute.
            ValueError: no loss is left with a positive weight (the disentangler's scale alone,
                on a model without one or whose disentangler has every term switched off): the
                phase would train nothing, and its first step would fail.
        """
        owned = sorted(set(loss_weights) & set(self.disentangler.loss_names)) \
            if self.disentangler is not None else []
        if owned:
            raise UserKeyError(f'phase {name}: loss weights {owned} belong to the disentangler: '
                               'set them in model.disentangler.loss_weights and scale the '
                               f"module's losses in the phase with '{DISENTANGLER_SCALE}'")
        unknown = set(loss_weights) - self.loss_names() - {DISENTANGLER_SCALE}
        if unknown:
            raise UserKeyError(f'phase {name}: unknown loss weights {sorted(unknown)}; this model '
                               f'computes {sorted(self.loss_names())}')
        weights = {key: float(weight) for key, weight in loss_weights.items() if weight}
        if not self.disentangler_computes():
            weights.pop(DISENTANGLER_SCALE, None)
        if not weights:
            none = ('the model has none' if self.disentangler is None else
                    f'its {type(self.disentangler).__name__} has every term switched off')
            raise ValueError(f'phase {name}: loss_weights={dict(loss_weights)} weigh no loss '
                             f"this model computes ('{DISENTANGLER_SCALE}' scales a "
                             f"disentangler's losses, and {none}); give one of "
                             f'{sorted(self.loss_names())} a positive weight')
        return weights

    def set_phase(self, name: str, loss_weights: Mapping[str, float]) -> None:
        """Select the phase whose losses :meth:`loss` runs, with their weights."""
        self.loss_weights = self.check_phase(name, loss_weights)
        self.phase = name

    def trainable_groups(self) -> dict[str, list[str]]:
        """Groups a phase's ``trainable`` may name, ``{group: [module path, ...]}``."""
        return {}

    # ----------------------------------------------------------------------------- towers
    def frozen_tower(self) -> torch.set_grad_enabled:
        """``with self.frozen_tower():`` runs the backbone without autograd unless the phase
        trains some of its weights (gradients through a frozen tower are wasted work)."""
        return torch.set_grad_enabled(torch.is_grad_enabled() and any(
            parameter.requires_grad for parameter in self.backbone.parameters()))

    def read_languages(self) -> list[str]:
        """The languages whose texts the model embeds (``xmr.apis.trained_languages``): its
        ``languages``."""
        return list(self.languages)

    def check_languages(self, languages: Sequence[str], where: str) -> None:
        """Fail unless the model reads every language (:meth:`read_languages`).

        Args:
            languages: languages of captions or queries.
            where: what holds them (``'query'``, ``'test dataset flickr30k (path)'``).

        Raises:
            ValueError: naming ``where``, the languages it does not read and those it reads.
        """
        self.check_read(languages, self.read_languages(), where)

    #: The config keys :meth:`configured_languages` reads, for the message of a refusal.
    LANGUAGE_KEYS: ClassVar[str] = 'model.languages'

    @classmethod
    def configured_languages(cls, cfg: Mapping[str, Any]) -> list[str] | None:
        """What :meth:`read_languages` of the model ``cfg`` builds will give, from the config
        alone (no weight loaded; ``xmr.apis.check_config_languages``); ``None`` where the config
        does not tell, and the built model alone is checked (the default: a retriever of one's
        own declares its languages as built)."""
        return None

    @classmethod
    def check_read(cls, languages: Sequence[str], read: Sequence[str], where: str) -> None:
        """:meth:`check_languages`'s refusal, for languages ``read`` (:meth:`read_languages`,
        or :meth:`configured_languages` before the model is built).

        Raises:
            ValueError: naming ``where``, the languages not read and those read.
        """
        unread = [lang for lang in languages if lang not in read]
        if unread:
            raise ValueError(f'{where}: the model does not read {unread}; it reads {list(read)}')

    @classmethod
    def check_module_languages(cls, languages: Sequence[str], read: Sequence[str],
                               where: str) -> None:
        """Refuse, among ``languages`` the model reads (:meth:`check_read` passed on ``read``),
        those without a trained module of their own (what an export, a merge or a
        disentangler's features need): none here, every language being the model's own."""

    def media_head(self) -> dict[str, nn.Module]:
        """The trained modules a media's retrieval embedding passes through after the backbone,
        by name (a saved gallery's ``encoded_by`` keys them beside the backbone): none here, as
        for a cross-lingual retriever, whose language modules read text alone."""
        return {}

    def token_score(self) -> TokenScore | None:
        """The function the model scores a media–caption pair with from their tokens, when it
        does (its ``predict`` then emits ``media_tokens``, ``caption_tokens`` and this as
        ``token_score``, which evaluation's token scoring and ``MediaIndex`` rank with);
        ``None`` here: a pair is scored by the cosine of its two embeddings."""
        return None

    # ----------------------------------------------------------------------------- modes
    def forward(self, mode: str = 'tensor', **batch: Any) -> Any:
        """MMEngine's entry: ``loss`` -> :meth:`loss`; ``predict`` and ``tensor`` ->
        :meth:`predict`."""
        if mode == 'loss':
            return self.loss(**batch)
        if mode in ('predict', 'tensor'):
            return self.predict(**batch)
        raise ValueError(f"unknown forward mode '{mode}' (loss, predict or tensor)")

    def train_step(self, data: Any, optim_wrapper: Any) -> dict[str, torch.Tensor]:
        """MMEngine's training step, refusing a batch that kept no item.

        Raises:
            ValueError: every item of ``data`` was skipped as unreadable (``on_corrupt='skip'``),
                naming the files: the losses would blame a text the batch lacks.
        """
        if kept_no_item(data):
            raise ValueError(
                "every item of a training batch was skipped as unreadable (on_corrupt='skip'): "
                f"{', '.join(data.get('skipped_media', []))}; a step needs at least one item: "
                'replace these files or remove them from the annotation, or train with a larger '
                'batch_size')
        return super().train_step(data, optim_wrapper)

    @abstractmethod
    def loss(self, **batch: Any) -> dict[str, torch.Tensor]:
        """The current phase's weighted losses, ``{'loss_<name>': scalar}``."""

    @abstractmethod
    def predict(self, **batch: Any) -> list[dict[str, Any]]:
        """A gallery batch -> one dict per item (see :func:`gallery_items`)."""

    # ----------------------------------------------------------------------------- checkpoints
    def checkpoint_facts(self) -> dict[str, Any]:
        """What a checkpoint must agree on with the config it is loaded into (JSON values);
        subclasses add their own to these. The disentangler's type is named, so that a
        checkpoint of one method loaded into another's config says so rather than listing
        keys. The backbone's settings that no weight holds (``checkpoint_settings``: an
        open_clip record's QuickGELU, mean and std, image size) are one, and the
        disentangler's (:meth:`~xmr.models.disentanglers.base.SettingsWithoutWeights.settings`:
        the SDM's depth, CDDS's attention heads): the same weights run under other settings
        compute other features."""
        return dict(backbone=type(self.backbone).__name__,
                    backbone_settings=self.backbone.checkpoint_settings(),
                    embed_dim=self.backbone.embed_dim,
                    languages=list(self.languages),
                    disentangler=None if self.disentangler is None
                    else type(self.disentangler).__name__,
                    disentangler_settings={} if self.disentangler is None
                    else self.disentangler.settings())

    def get_extra_state(self) -> dict[str, Any]:
        return self.checkpoint_facts()

    def set_extra_state(self, state: dict[str, Any]) -> None:
        check_checkpoint_facts(state, self.checkpoint_facts())


def unit_rows(embeddings: torch.Tensor) -> torch.Tensor:
    """``[N, E]`` embeddings L2-normalised in float32, on their device.

    A new tensor: compiled code's outputs, which its next CUDA-graph replay overwrites, are read
    once here, so a gallery batch can copy all its rows to the host at its end
    (:func:`gallery_batch`).
    """
    return F.normalize(embeddings.float(), dim=-1)


def gallery_items(media_embeddings: torch.Tensor | None, media_ids: Sequence[str] | None = None,
                  indices: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The dicts :class:`~xmr.evaluation.RetrievalMetric` reads, one per gallery item.

    Args:
        media_embeddings: ``[B, E]`` embeddings of the batch's images or videos; ``None`` for a
            text-only batch (its items then carry captions alone).
        media_ids: the items' ids (default: their row numbers); required without media.
        indices: the items' dataset indices, kept as ``index`` when given.

    Returns:
        ``[{'media_id', 'media_embedding' [E] (with media), 'caption_embeddings' {}, 'index'?}]``,
        the embedding L2-normalised float32 on CPU; :func:`attach_captions` fills the captions.
    """
    media = None if media_embeddings is None else unit_rows(media_embeddings).cpu()
    return _items(media, media_ids, indices)


def attach_captions(items: list[dict[str, Any]], lang: str, embeddings: torch.Tensor,
                    owner: torch.Tensor) -> None:
    """Give each item its captions of ``lang``: ``item['caption_embeddings'][lang]`` ``[n, E]``.

    Args:
        items: from :func:`gallery_items`.
        lang: the captions' language.
        embeddings: ``[N, E]`` caption embeddings (L2-normalised here, float32 on CPU).
        owner: ``[N]`` the row of ``items`` each caption belongs to.
    """
    _attach(items, lang, unit_rows(embeddings).cpu(), owner.cpu())


def gallery_batch(media_rows: torch.Tensor | None,
                  caption_rows: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
                  media_ids: Sequence[str] | None = None,
                  indices: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """:func:`gallery_items` with :func:`attach_captions` for every language, the rows copied
    to the host at once: one wait for the device per gallery batch, not one per tensor (which
    left the device idle while the host encoded the next language).

    Args:
        media_rows: ``[B, E]`` :func:`unit_rows` of the media, or ``None``.
        caption_rows: ``{lang: ([N, E] unit_rows of its captions, owner [N])}``; the owners on
            the host (the data preprocessor leaves them there).
        media_ids, indices: as :func:`gallery_items`.

    Returns:
        What :func:`gallery_items` and :func:`attach_captions` make of the same embeddings.
    """
    parts = [rows for rows, _ in caption_rows.values()]
    if media_rows is not None:
        parts.insert(0, media_rows)
    host = list(torch.cat(parts).cpu().split([len(rows) for rows in parts])) if parts else []
    # The items keep views of their media rows: copied apart, the captions' rows are not kept
    # with them (the captions' own rows are copies, made in caption order).
    items = _items(host.pop(0).clone() if media_rows is not None else None, media_ids, indices)
    for (lang, (_, owner)), rows in zip(caption_rows.items(), host):
        _attach(items, lang, rows, owner.cpu())
    return items


def _items(media: torch.Tensor | None, media_ids: Sequence[str] | None,
           indices: Sequence[int] | None) -> list[dict[str, Any]]:
    """:func:`gallery_items` of ``[B, E]`` media rows already normalised on the host."""
    if media is None:
        if media_ids is None:
            raise ValueError('a batch without media needs its media_ids to name its items')
        items = [dict(media_id=media_id, caption_embeddings={}) for media_id in media_ids]
    else:
        items = [dict(media_id=(media_ids[i] if media_ids is not None else str(i)),
                      media_embedding=embedding, caption_embeddings={})
                 for i, embedding in enumerate(media.unbind())]
    for item, index in zip(items, indices if indices is not None else ()):
        item['index'] = int(index)
    return items


def _attach(items: list[dict[str, Any]], lang: str, embeddings: torch.Tensor,
            owner: torch.Tensor) -> None:
    """:func:`attach_captions` of ``[N, E]`` rows already normalised on the host."""
    # One gather and one split, not a mask per item (the host's work, per caption, in a
    # gallery step bound by the host).
    order = torch.argsort(owner, stable=True)
    counts = torch.bincount(owner, minlength=len(items)).tolist()
    if len(counts) > len(items):
        raise ValueError(f'caption owners name item {len(counts) - 1} of a batch of '
                         f'{len(items)} items')
    for item, own in zip(items, embeddings[order].split(counts)):
        item['caption_embeddings'][lang] = own


def feature_rows(features: torch.Tensor | Sequence[torch.Tensor] | None) -> torch.Tensor | None:
    """Cached features as one ``[B, E]`` tensor (``retrieval_collate`` stacks them; a batch
    from another collate function may carry ``B`` rows ``[E]``)."""
    if features is None or isinstance(features, torch.Tensor):
        return features
    return torch.stack(list(features))
