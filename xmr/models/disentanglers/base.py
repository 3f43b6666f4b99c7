"""The two contracts a disentangler can meet, one per kind of retriever that runs it.

* :class:`ConditionDisentangler` (DASD's SDM): reads the target-language embeddings of a
  caption and returns the condition of the dynamic adapters plus its own losses. The
  :class:`~xmr.models.retrievers.cross_lingual.CrossLingualRetriever` runs it, built with the
  text tower as ``tower=`` and the blocks whose adapters read the condition as
  ``condition_blocks=``.
* :class:`TokenDisentangler` (CDDS): decouples the token sequences of an image-text dual
  encoder into semantic components and scores them. The
  :class:`~xmr.models.retrievers.dual_encoder.DualEncoderRetriever` runs it, built with the
  joint width as ``dim=``.

A retriever refuses a disentangler of the other kind (or of neither) when it is built, naming
the class and the base it needs.
"""
from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from xmr.registry import DISENTANGLERS

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower, TowerShape
    from xmr.models.language.tokenizers import TokenBatch


class SettingsWithoutWeights:
    """What both kinds of disentangler give a checkpoint to record beyond their weights."""

    def settings(self) -> dict[str, Any]:
        """What the module computes with that none of its weights holds (JSON values), ``{}``
        by default: the SDM's depth without stream adapters, CDDS's attention heads.

        A checkpoint records them (``disentangler_settings`` among the retriever's checkpoint
        facts) and is refused by a config of other values: its weights load there and compute
        other features.
        """
        return {}


class ConditionDisentangler(SettingsWithoutWeights, nn.Module, metaclass=ABCMeta):
    """SDM-style: target embeddings -> a condition for the adapters and named losses.

    Attributes:
        reads_languages: ``True`` for a module that needs each caption's language; the retriever
            then passes ``langs=`` (``B`` codes) to :meth:`forward`.
        builder_options: config keys the retriever reads and removes before it builds the
            module (``per_language``: one copy per target language), so that the config's load
            takes them as options.
        given_by_builder: what the retriever passes (its text tower, the blocks whose adapters
            read the condition), which a config may not give: the config's load refuses them.
    """

    reads_languages: bool = False
    builder_options: ClassVar[tuple[str, ...]] = ('per_language',)
    given_by_builder: ClassVar[tuple[str, ...]] = ('tower', 'condition_blocks')

    @classmethod
    def check_adapter_types(cls, adapter_types: Sequence[type]) -> None:
        """Refuse, from the config alone, a branch whose adapters (of ``adapter_types``, those
        of ``model.language_branch.adapters``) cannot take this module's condition; any can by
        default."""

    @classmethod
    def check_adapter_configs(cls, cfg: Mapping[str, Any], adapters: Any) -> None:
        """Refuse, from this module's config and the branch's adapter configs
        (``model.language_branch.adapters``: one, a list or ``None``), adapters whose options
        do not fit the condition this module makes (DASD's SDM: dynamic adapters whose width is
        not its ``W^z``'s); any fit by default."""

    @classmethod
    def check_tower(cls, cfg: Mapping[str, Any], tower: TextTower | TowerShape) -> None:
        """Refuse, from this module's config and the text tower's ``width`` and ``num_blocks``
        (the built tower, or the :class:`~xmr.models.backbones.base.TowerShape` of the
        backbone's config as it loads), options that do not fit the tower; any fit by
        default."""

    @classmethod
    def check_tokenizer_config(cls, cfg: Mapping[str, Any], tokenizer: Any,
                               tower: TextTower | TowerShape | None) -> None:
        """Refuse, from this module's config, the branch's tokenizer config
        (``model.language_branch.tokenizer``) and the text tower (the
        :class:`~xmr.models.backbones.base.TowerShape` of the backbone's config, whose
        ``fixed_context`` pads every caption to the context whatever the tokenizer's config
        says; ``None`` where the config does not tell), options the padding cannot serve; any
        fit by default."""

    @property
    @abstractmethod
    def loss_names(self) -> Set[str]:
        """Names of the losses :meth:`forward` returns in training (a phase may weight them)."""

    @abstractmethod
    def forward(self, embeddings: torch.Tensor, tokens: TokenBatch,
                r_source: torch.Tensor | None = None) -> tuple[Any, dict[str, torch.Tensor]]:
        """The condition of the branch's adapters and, given ``r^S``, the losses.

        Args:
            embeddings: ``[B, L, D]`` target embeddings with positions (the branch's ``embed``).
            tokens: their :class:`TokenBatch` (``attention_mask``, ``eos_index``) as the
                branch reads them (:meth:`~xmr.models.language.branch.TargetLanguageBranch.read`).
            r_source: ``[B, E]`` frozen source embeddings of the paired captions, or ``None``
                (inference: no losses).

        Returns:
            ``(condition, {name: loss})``, each loss under the module's own weight (the SDM's
            ``loss_weights``, lambda_1 and lambda_2), which the phase's ``disentangler`` weight
            then scales; the condition reaches every adapter as ``ctx.condition`` (DASD:
            ``{block: W^z [B, d_u, d_u]}``).
        """


class TokenDisentangler(SettingsWithoutWeights, nn.Module, metaclass=ABCMeta):
    """CDDS-style: token sequences of a dual encoder -> semantic components and their losses."""

    @classmethod
    def check_tower(cls, cfg: Mapping[str, Any], tower: TextTower | TowerShape) -> None:
        """Refuse, from this module's config and the text tower's output width ``embed_dim``
        (the width of the tokens the dual encoder gives it: the built tower, or the
        :class:`~xmr.models.backbones.base.TowerShape` of the backbone's config as it loads),
        options that do not fit the tokens; any fit by default."""

    @property
    @abstractmethod
    def loss_names(self) -> Set[str]:
        """Names of the terms :meth:`forward` returns in training."""

    @abstractmethod
    def encode_image(self, patch_tokens: torch.Tensor, patch_mask: torch.Tensor) -> torch.Tensor:
        """Semantic components of patches: ``[B, P, E]``, mask ``[B, P]`` -> ``[B, P, E]``."""

    @abstractmethod
    def encode_text(self, word_tokens: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """Semantic components of words: ``[B, W, E]``, mask ``[B, W]`` -> ``[B, W, E]``."""

    @abstractmethod
    def pool(self, semantic: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One retrieval embedding per sample: ``[B, N, E]``, mask ``[B, N]`` -> ``[B, E]``."""

    @abstractmethod
    def forward(self, patch_tokens: torch.Tensor, patch_mask: torch.Tensor,
                word_tokens: torch.Tensor, word_mask: torch.Tensor) -> dict[str, Any]:
        """Components and weighted losses of a paired batch.

        Returns:
            ``image_semantic [B, P, E]``, ``text_semantic [B, W, E]`` and ``losses``
            (``{'loss_<name>': weighted term}`` for the names in :attr:`loss_names`).
        """

    def dataset_correlation(self) -> nn.Module | None:
        """The correlation this module estimates over the training set before a phase, if any
        (CDDS's dataset-level column correlation, Table 5); ``None`` by default."""
        return None

    def update_correlation(self, patch_tokens: torch.Tensor, patch_mask: torch.Tensor,
                           word_tokens: torch.Tensor, word_mask: torch.Tensor) -> None:
        """Add one training batch to :meth:`dataset_correlation`'s estimate."""
        raise TypeError(f'{type(self).__name__} keeps no dataset correlation to update')


def disentangler_class(cfg: Mapping[str, Any], kind: type[nn.Module], retriever: str) -> type:
    """The class of a ``DISENTANGLERS`` config, checked to meet ``kind``'s contract.

    Raises:
        TypeError: naming the class, the base ``retriever`` needs and the two bases.
    """
    cls = cfg['type'] if isinstance(cfg['type'], type) else DISENTANGLERS.get(cfg['type'])
    if not (isinstance(cls, type) and issubclass(cls, kind)):
        name = cls.__name__ if isinstance(cls, type) else repr(cfg['type'])
        raise TypeError(
            f'{retriever} runs disentanglers that subclass {kind.__name__}; {name} does not '
            '(xmr.models.disentanglers.base has ConditionDisentangler for target-language '
            'conditions and TokenDisentangler for dual-encoder token decoupling)')
    return cls


def build_disentangler(cfg: dict, kind: type[nn.Module], retriever: str,
                       **default_args: Any) -> nn.Module:
    """Build a ``DISENTANGLERS`` config after checking its class meets ``kind``'s contract
    (:func:`disentangler_class`)."""
    disentangler_class(cfg, kind, retriever)
    return DISENTANGLERS.build(cfg, default_args=default_args)
