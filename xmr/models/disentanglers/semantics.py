"""DASD's semantics disentangling module (SDM) with its parameter generator and adversary.

For the embedded target captions ``X`` ``[B, L, D]`` (embedding block + positions):

* two streams run the first ``k`` frozen blocks of the text tower, each block followed by the
  stream's trainable bottleneck adapter, ``A^sr`` or ``A^sa`` (``k = 0``: no block, each adapter
  once on ``X``, the paper's "two MLPs" point of Figure 4);
* ``f^sr = W_p^sr · LN(x_pool)``: the tower's pooled token (EOS for CLIP, CLS for BERT-style
  towers) of the ``sr`` stream, normalised and projected to the joint space ``E``;
* ``f^sa = mean_t LN(x_t)`` over the non-padding tokens of the ``sa`` stream, ``[B, D]``;
* the generator turns ``[f^sr; f^sa]`` into one ``W^z`` per adapted block (the condition of
  :class:`~xmr.models.adapters.DynamicAdapter`);
* in training, with the source embeddings ``r^S``: ``sc`` = ``L_sc(f^sr, r^S)`` (L1 by
  default) and ``adv`` = ``L_d`` of :class:`PairDiscriminator` on ``(f^sa, r^S)`` against a
  shuffled ``r^S−``, behind gradient reversal (see :mod:`.discriminator`), so that minimising
  ``λ1 · adv`` trains the discriminator on ``L_d`` and the SDM on ``L_adv = −L_d``; the
  reversed gradient stops at the SDM's input, so the shared embedding block does not play.

The frozen blocks are the backbone's (used, not owned); everything else here trains, and is
shared by the target languages it is built for (``per_language=True``, which the paper configs
set, builds one per language).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from xmr.models.adapters.base import (
    AdapterContext,
    AdapterPlacement,
    AdapterSite,
    BaseAdapter,
    check_tower_width,
)
from xmr.models.adapters.dynamic import DynamicAdapter
from xmr.models.adapters.language_adapters import adapter_configs, adapter_types
from xmr.models.disentanglers.base import ConditionDisentangler
from xmr.models.disentanglers.discriminator import (
    PairDiscriminator,
    reverse_gradient,
    shuffled_negatives,
)
from xmr.models.disentanglers.parameter_generator import ParameterGenerator
from xmr.models.language.tokenizers import TokenBatch
from xmr.models.losses.distributed import gather_with_grad
from xmr.models.losses.pair import PairLoss
from xmr.models.pooling import masked_token_mean
from xmr.models.unowned import hold_unowned
from xmr.registry import ADAPTERS, DISENTANGLERS, MODELS, with_defaults
from xmr.utils.cli import UserKeyError
from xmr.utils.counts import is_finite_number

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower, TowerShape

#: The two semantic features; ``features`` of the disentangler picks those fed to the generator.
FEATURES = ('sr', 'sa')

#: lambda_1 (adversarial) and lambda_2 (semantic consistency) of DASD Eq. 12.
PAPER_LOSS_WEIGHTS = {'adv': 1.0, 'sc': 0.1}

#: The config key of the streams' adapters, as messages name it.
SDM_ADAPTER_KEY = 'model.disentangler.adapter'

#: An SDM serves every language it is built for; its adapters read no language from the
#: context.
SHARED = '*'


def _checked_features(features: Sequence[str], use_consistency_loss: bool,
                      use_adversarial: bool) -> tuple[str, ...]:
    """``features`` as a tuple, once each is known and the losses that read them are kept."""
    features = tuple(features)
    if not features or any(f not in FEATURES for f in features) or \
            len(set(features)) != len(features):
        raise ValueError(f'features must be a non-empty subset of {FEATURES}, got {features}')
    if use_consistency_loss and 'sr' not in features:
        raise ValueError(f"L_sc supervises f^sr, which features={features} leaves out; set "
                         'use_consistency_loss=False')
    if use_adversarial and 'sa' not in features:
        raise ValueError(f"the discriminator reads f^sa, which features={features} leaves "
                         'out; set use_adversarial=False')
    return features


#: Why an SDM with no adapter to read its ``W^z`` is refused, and the ways out.
NO_CONDITION_READER = (
    "no adapter of the target branch reads the SDM's condition: no adapter type of "
    'model.language_branch.adapters sets reads_condition = True (DynamicAdapter does, as does a '
    'type of your own whose forward reads ctx.condition); use dynamic adapters, or '
    'disentangler=None')


def _checked_loss_weights(loss_weights: Mapping[str, float] | None) -> dict[str, float]:
    """lambda_1 and lambda_2 of Eq. 12, the paper's where ``loss_weights`` leaves one out."""
    weights = dict(PAPER_LOSS_WEIGHTS, **(loss_weights or {}))
    if set(weights) != set(PAPER_LOSS_WEIGHTS):
        raise UserKeyError(f'SDM loss_weights name {sorted(weights)}; the SDM computes '
                           f'{sorted(PAPER_LOSS_WEIGHTS)} (lambda_1, lambda_2)')
    for name, weight in weights.items():
        # A negative adv would turn the reversed gradient around: the SDM would help F.
        if not is_finite_number(weight) or weight < 0:
            raise ValueError(f'SDM loss_weights[{name!r}]={weight!r} must be a finite number '
                             f'>= 0 (the paper: {PAPER_LOSS_WEIGHTS[name]})')
    return weights


def batch_contrastive(loss: nn.Module | None) -> bool:
    """Whether ``loss`` (``L_sc``) takes the batch's other rows as negatives."""
    return isinstance(loss, PairLoss) and loss.batch_contrastive


def _check_consistency_loss(loss: nn.Module) -> None:
    """Refuse a batch-contrastive ``L_sc`` that masks the pairs of one medium: it needs the
    batch's media keys, which the SDM is not given, and would mask nothing."""
    if batch_contrastive(loss) and loss.mask_same_media:
        raise ValueError(
            f'model.disentangler.consistency_loss ({type(loss).__name__}) has '
            'mask_same_media=True, but the SDM is given no media keys to tell the captions of '
            'one medium by: set mask_same_media=False')


def _check_depth(depth: int, tower: TextTower | TowerShape) -> None:
    """``k`` is a count of the tower's blocks, ``0..num_blocks``."""
    if not 0 <= depth <= tower.num_blocks:
        raise ValueError(f'SDM depth {depth} is outside 0..{tower.num_blocks} (the text '
                         f"tower's blocks): set model.disentangler.depth in "
                         f'0..{tower.num_blocks}')


def _checked_generator(generator: Mapping[str, object] | None) -> dict[str, object]:
    """The generator's options, which may not place it: it follows the adapters."""
    generator = dict(generator or {})
    if 'blocks' in generator:
        raise ValueError('the generator produces W^z for the blocks whose adapters read it; '
                         'place the dynamic adapters (language_branch.adapters.blocks) '
                         'instead of setting generator.blocks')
    return generator


def _check_stream_adapter(kind: type | None) -> None:
    """Refuse an ``A^sr`` / ``A^sa`` type that reads the condition (``reads_condition``, as
    :class:`DynamicAdapter` does): the streams run before the generator, so no ``W^z`` exists
    for them to read, and the model would stop at the first step that runs the SDM, which may
    follow a whole source-finetune phase."""
    if getattr(kind, 'reads_condition', False):
        raise ValueError(
            f'{SDM_ADAPTER_KEY} is {kind.__name__}, which reads the W^z the SDM generates '
            '(reads_condition = True), but the SDM\'s streams run before the generator: give '
            f'{SDM_ADAPTER_KEY} an adapter that reads no condition (the paper\'s A^sr / A^sa: '
            "type='StaticAdapter', hidden=256)")


def _condition_blocks(blocks: Sequence[int] | None, num_blocks: int) -> list[int]:
    """The tower's blocks whose adapters read the condition (``None``: all of them)."""
    blocks = list(range(num_blocks)) if blocks is None else list(blocks)
    if not blocks:
        raise ValueError(NO_CONDITION_READER)
    outside = [b for b in blocks if not 0 <= b < num_blocks]
    if outside:
        raise ValueError(f'generator blocks {outside} are outside the text tower\'s blocks '
                         f'0..{num_blocks - 1}')
    return blocks


class _StreamHooks:
    """Site hooks that put one stream's adapter after each block the SDM runs."""

    def __init__(self, adapters: nn.ModuleList, ctx: AdapterContext) -> None:
        self.adapters = adapters
        self.ctx = ctx

    def residual(self, site: AdapterSite, block_index: int, x: torch.Tensor) -> torch.Tensor:
        if site != AdapterSite.BLOCK_OUTPUT:
            return x
        self.ctx.block_index = block_index
        return self.adapters[block_index](x, self.ctx)

    def linear(self, site: AdapterSite, block_index: int, x_in: torch.Tensor) -> None:
        return None


@DISENTANGLERS.register_module()
class SemanticsDisentangler(ConditionDisentangler):
    """Semantic-related / semantic-agnostic features of a caption and the ``W^z`` they generate.

    Args:
        tower: the backbone's :class:`TextTower` (filled in by the retriever); used, not owned.
        depth: ``k``, the frozen blocks the SDM runs (1 in the paper; Figure 4 sweeps 0..12).
        adapter: ``ADAPTERS`` config of ``A^sr`` and ``A^sa`` (a block-output adapter; the
            paper's bottleneck of hidden 256).
        features: the features fed to the generator, ``('sr', 'sa')`` (paper), ``('sr',)`` or
            ``('sa',)`` (Table 5). A stream that feeds nothing is not built.
        generator: options of :class:`ParameterGenerator`: ``d_z`` (512) and ``d_u`` (32). Its
            blocks are ``condition_blocks``: the generator follows the adapters.
        condition_blocks: the blocks whose adapters read the condition (filled in by the
            retriever from the branch; standalone, every tower block).
        consistency_loss: ``MODELS`` config of ``L_sc``; default ``AlignmentLoss`` with
            ``kind='l1'`` (paper; ``'mse'`` and ``'smooth_l1'`` for Table 7). A per-caption
            distance is this rank's mean under DDP (the gradients' average makes it the global
            batch's); a batch-contrastive :class:`~xmr.models.losses.pair.PairLoss`
            (``InfoNCELoss``) sees the global batch (``gather_with_grad``), as the retrievers'
            contrastive losses do, and may not mask by media (the SDM has no media keys).
        discriminator: options of :class:`PairDiscriminator`; default ``hidden=(256, 128)``.
        use_consistency_loss: compute ``L_sc`` (``False``: Table 6 "w/o L_sc"). Needs ``'sr'``
            in ``features``.
        use_adversarial: build the discriminator and compute ``L_adv`` (``False``: Table 6
            "w/o L_adv"). Needs ``'sa'`` in ``features``.
        adversarial_through_embeddings: let the reversed gradient of ``L_adv`` flow on into the
            embedding block shared with the target branch, as the authors' code does; by
            default (the paper's game between ``F`` and the SDM) it stops at the SDM's input.
        stream_adapters: build ``A^sr`` / ``A^sa`` (paper); ``False`` runs both streams as the
            frozen blocks alone, as the authors' code does (it never calls its adapters).
        padding_as_tokens: run the padding through the SDM's blocks as tokens (causal mask
            only) and average it into ``f^sa``, as the authors' code does with captions padded
            to 77; by default padding is masked and left out of the mean. With a causal tower
            ``f^sr`` (pooled at EOS) is the same either way.
        loss_weights: ``{'adv': lambda_1, 'sc': lambda_2}`` of Eq. 12 (paper: 1 and 0.1).
            The module returns its losses with these weights; a training phase scales them all
            with its ``disentangler`` weight (0 switches them off).
    """

    #: Options without a ``type`` and what each goes to, less the arguments this module fills
    #: in: checked as the config loads (:func:`~xmr.registry.check_part_options`).
    option_dicts: ClassVar[Mapping[str, tuple[Callable, tuple[str, ...]]]] = {
        'generator': (ParameterGenerator, ('in_features', 'blocks')),
        'discriminator': (PairDiscriminator, ('in_features',))}

    def __init__(self, tower: TextTower, depth: int = 1,
                 adapter: dict | None = None, features: Sequence[str] = FEATURES,
                 generator: dict | None = None, consistency_loss: dict | None = None,
                 discriminator: dict | None = None, use_consistency_loss: bool = True,
                 use_adversarial: bool = True,
                 adversarial_through_embeddings: bool = False, stream_adapters: bool = True,
                 padding_as_tokens: bool = False,
                 loss_weights: Mapping[str, float] | None = None,
                 condition_blocks: Sequence[int] | None = None) -> None:
        super().__init__()
        hold_unowned(self, 'tower', tower)
        _check_depth(depth, tower)
        features = _checked_features(features, use_consistency_loss, use_adversarial)
        self.loss_weights = _checked_loss_weights(loss_weights)
        self.depth = depth
        self.features = features
        self.adversarial_through_embeddings = adversarial_through_embeddings
        self.padding_as_tokens = padding_as_tokens
        adapter = dict(adapter or dict(type='StaticAdapter', hidden=256)) if stream_adapters \
            else None
        width, embed_dim = tower.width, tower.embed_dim
        if 'sr' in features:
            self.sr_adapters = self._build_adapters(adapter)
            self.sr_norm = nn.LayerNorm(width)
            self.sr_projection = nn.Linear(width, embed_dim, bias=False)
            # CLIP's initialisation of its text projection (the authors' W_p^sr is left
            # uninitialised).
            nn.init.normal_(self.sr_projection.weight, std=width ** -0.5)
        if 'sa' in features:
            self.sa_adapters = self._build_adapters(adapter)
            self.sa_norm = nn.LayerNorm(width)
        generator = _checked_generator(generator)
        blocks = _condition_blocks(condition_blocks, tower.num_blocks)
        in_features = (embed_dim if 'sr' in features else 0) + (width if 'sa' in features
                                                                else 0)
        self.generator = ParameterGenerator(in_features, blocks, **generator)
        self.consistency_loss = None
        if use_consistency_loss:
            self.consistency_loss = MODELS.build(
                consistency_loss or dict(type='AlignmentLoss', kind='l1'))
            _check_consistency_loss(self.consistency_loss)
        self.discriminator = None
        if use_adversarial:
            self.discriminator = PairDiscriminator(width + embed_dim,
                                                   **(discriminator or dict(hidden=(256, 128))))

    @classmethod
    def check_config(cls, cfg: Mapping[str, object]) -> None:
        """Refuse, as the config loads (:func:`~xmr.registry.check_part_options`), options
        that ``__init__`` would refuse without the tower: ``features`` the kept losses do not
        read, ``loss_weights`` naming another loss, ``generator.blocks``, and a stream
        ``adapter`` that reads the condition."""
        options = with_defaults(cls, cfg)
        _checked_features(options['features'], options['use_consistency_loss'],
                          options['use_adversarial'])
        _checked_loss_weights(options['loss_weights'])
        _checked_generator(options['generator'])
        if options['stream_adapters']:
            for kind in adapter_types(options['adapter']) or ():
                _check_stream_adapter(kind)

    @classmethod
    def check_tower(cls, cfg: Mapping[str, object], tower: TextTower | TowerShape) -> None:
        """Refuse, from the config and the tower's width and depth alone, a ``depth`` beyond
        the tower's blocks and a stream ``adapter.width`` other than the tower's, as the build
        does (:meth:`ConditionDisentangler.check_tower`)."""
        options = with_defaults(cls, cfg)
        _check_depth(options['depth'], tower)
        if options['stream_adapters']:
            check_tower_width(SDM_ADAPTER_KEY, options['adapter'], tower.width)

    def settings(self) -> dict[str, Any]:
        """``depth`` (in no weight's shape without stream adapters), ``padding_as_tokens`` and
        the generator's activation."""
        return dict(depth=self.depth, generator_activation=self.generator.activation,
                    padding_as_tokens=self.padding_as_tokens)

    @classmethod
    def check_tokenizer_config(cls, cfg: Mapping[str, object], tokenizer: object,
                               tower: TextTower | TowerShape | None) -> None:
        """Refuse ``padding_as_tokens`` with a tokenizer that pads each batch to its longest
        caption (no ``pad_to``): ``f^sa`` averages the padding in, so a caption's embedding
        would depend on the other captions of its batch (evaluation's batch, a query's
        ``batch_size``). The authors pad every caption to 77. A fixed-context tower's
        (``tower.fixed_context``: SigLIP's) captions are all padded to its context, ``pad_to``
        given or not (:class:`~xmr.models.language.branch.TargetLanguageBranch`); a tower the
        config does not tell (``None``) needs the ``pad_to``. A tokenizer given built (a
        :class:`~xmr.models.language.tokenizers.BaseTokenizer`) is checked by its ``pad_to``
        as a config is."""
        if not with_defaults(cls, cfg)['padding_as_tokens'] or tokenizer is None:
            return
        built = not isinstance(tokenizer, Mapping)
        pad_to = getattr(tokenizer, 'pad_to', None) if built else tokenizer.get('pad_to')
        if pad_to is None and not (tower is not None and tower.fixed_context):
            given = f' (a built {type(tokenizer).__name__})' if built else ''
            raise ValueError(
                'model.disentangler.padding_as_tokens=True averages the padding into f^sa, but '
                f'model.language_branch.tokenizer{given} has no pad_to: it pads each batch to its '
                "longest caption, and a caption's embedding would depend on the other captions "
                "of its batch; give the tokenizer pad_to (the authors' 77: the tower's context "
                'length) or padding_as_tokens=False')

    @classmethod
    def check_adapter_types(cls, adapter_types: Sequence[type]) -> None:
        """Refuse a branch none of whose adapter types reads the condition: the generator
        would make ``W^z`` for no block (``__init__``'s ``condition_blocks=[]``)."""
        if not any(getattr(kind, 'reads_condition', False) for kind in adapter_types):
            raise ValueError(NO_CONDITION_READER)

    @classmethod
    def check_adapter_configs(cls, cfg: Mapping[str, object], adapters: object) -> None:
        """Refuse dynamic adapters whose bottleneck ``hidden`` is not the generator's ``d_u``
        (either's default counting): ``W^z``, ``d_u × d_u``, sits between their ``W_down`` and
        ``W_up``. Built, the model would stop at its first forward with a condition, which
        may come after a whole source-finetune phase or a feature cache's build. An adapter
        type of one's own that reads the condition checks its ``W^z`` itself."""
        generator = _checked_generator(with_defaults(cls, cfg)['generator'])
        if set(generator) - set(inspect.signature(ParameterGenerator).parameters):
            return  # a misspelt d_u: the check of the generator's options that follows names it
        d_u = with_defaults(ParameterGenerator, generator)['d_u']
        for adapter, kind in zip(adapter_configs(adapters), adapter_types(adapters) or ()):
            if not issubclass(kind, DynamicAdapter):
                continue
            hidden = with_defaults(kind, adapter)['hidden']
            if hidden != d_u:
                raise ValueError(
                    f'model.disentangler.generator.d_u={d_u} but model.language_branch.adapters '
                    f'({kind.__name__}) has hidden={hidden}: W^z (d_u × d_u) sits between the '
                    "dynamic adapters' W_down and W_up; give both the same d_u (DASD: 32)")

    def _build_adapters(self, cfg: dict | None) -> nn.ModuleList | None:
        """One adapter after each of the ``k`` blocks, or one on the embeddings at ``k = 0``;
        ``None`` without stream adapters."""
        if cfg is None:
            return None
        check_tower_width(SDM_ADAPTER_KEY, cfg, self.tower.width)
        cfg = dict(cfg)
        cfg.pop('width', None)
        adapters = nn.ModuleList()
        for index in (range(self.depth) if self.depth else [-1]):
            placement = AdapterPlacement(self.tower.width, AdapterSite.BLOCK_OUTPUT, index)
            adapter = ADAPTERS.build(cfg, default_args=dict(placement=placement))
            if not isinstance(adapter, BaseAdapter):
                raise TypeError(f"SDM adapter type {cfg['type']} must subclass xmr BaseAdapter")
            _check_stream_adapter(type(adapter))
            adapters.append(adapter)
        return adapters

    @property
    def loss_names(self) -> frozenset[str]:
        """Names of the losses this module returns in training."""
        names = set()
        if self.consistency_loss is not None:
            names.add('sc')
        if self.discriminator is not None:
            names.add('adv')
        return frozenset(names)

    # ----------------------------------------------------------------------------- features
    def _token_mask(self, tokens: TokenBatch) -> torch.Tensor:
        """``[B, L]`` tokens the SDM attends to and averages: all of them with padding as tokens."""
        mask = tokens['attention_mask']
        return torch.ones_like(mask) if self.padding_as_tokens else mask

    def _stream(self, adapters: nn.ModuleList | None, embeddings: torch.Tensor,
                tokens: TokenBatch) -> torch.Tensor:
        """``[B, L, D]`` -> ``[B, L, D]`` through ``k`` frozen blocks and the stream's adapters."""
        ctx = AdapterContext(lang=SHARED, attention_mask=self._token_mask(tokens),
                             eos_index=tokens['eos_index'])
        if self.depth == 0:
            return embeddings if adapters is None else adapters[0](embeddings, ctx)
        if adapters is None or all(adapter.accepts_packed_tokens for adapter in adapters):
            ctx.packed = self.tower.packing(ctx.attention_mask)
        hooks = None if adapters is None else _StreamHooks(adapters, ctx)
        return self.tower.encode_embeddings(embeddings, ctx.attention_mask,
                                            hooks=hooks, blocks=range(self.depth),
                                            packed=ctx.packed)

    def semantic_related(self, embeddings: torch.Tensor, tokens: TokenBatch) -> torch.Tensor:
        """``f^sr = W_p^sr · LN(x_pool)``, ``[B, L, D]`` -> ``[B, E]``."""
        x = self._stream(self.sr_adapters, embeddings, tokens)
        pooled = self.tower.pool(x, tokens['attention_mask'], tokens['eos_index'])
        return self.sr_projection(self.sr_norm(pooled))

    def semantic_agnostic(self, embeddings: torch.Tensor, tokens: TokenBatch) -> torch.Tensor:
        """``f^sa = mean_t LN(x_t)`` over the non-padding tokens (all of them with
        ``padding_as_tokens``), ``[B, L, D]`` -> ``[B, D]``."""
        x = self.sa_norm(self._stream(self.sa_adapters, embeddings, tokens))
        return masked_token_mean(x, self._token_mask(tokens))

    def extract(self, embeddings: torch.Tensor, tokens: TokenBatch) -> dict[str, torch.Tensor]:
        """The configured features, ``{'sr': [B, E], 'sa': [B, D]}`` (a subset when ablated)."""
        found = {}
        if 'sr' in self.features:
            found['sr'] = self.semantic_related(embeddings, tokens)
        if 'sa' in self.features:
            found['sa'] = self.semantic_agnostic(embeddings, tokens)
        return found

    def consistency(self, f_sr: torch.Tensor, r_source: torch.Tensor) -> torch.Tensor:
        """``L_sc`` (unweighted) of ``f^sr`` and ``r^S``, ``[B, E]`` each -> scalar.

        A per-caption distance (the paper's L1) is the mean over this rank's captions: DDP's
        average of the ranks' gradients is then the global batch's. A batch-contrastive loss
        compares each caption with the others of the batch, so it is handed the global batch
        (:func:`~xmr.models.losses.distributed.gather_with_grad`), as one process would see it.
        """
        if batch_contrastive(self.consistency_loss):
            return self.consistency_loss(*gather_with_grad(f_sr, r_source))
        return self.consistency_loss(f_sr, r_source)

    # ----------------------------------------------------------------------------- forward
    def forward(self, embeddings: torch.Tensor, tokens: TokenBatch,
                r_source: torch.Tensor | None = None, r_negative: torch.Tensor | None = None
                ) -> tuple[dict[int, torch.Tensor], dict[str, torch.Tensor]]:
        """Condition of the dynamic adapters and, given ``r^S``, the SDM's losses.

        Args:
            embeddings: ``[B, L, D]`` target embeddings with positions (the branch's ``embed``).
            tokens: their :class:`TokenBatch` (``attention_mask``, ``eos_index``) as the
                branch reads them (:meth:`~xmr.models.language.branch.TargetLanguageBranch.read`).
            r_source: ``[B, E]`` frozen source embeddings of the paired English captions, or
                ``None`` (inference: no losses).
            r_negative: ``[B, E]`` the discriminator's mismatched ``r^S−``, source embeddings of
                other captions; by default drawn from ``r_source`` (``shuffled_negatives``). A
                per-language module is given them from the whole batch, so that a language with
                one caption in the batch still has a negative.

        Returns:
            ``({block: W^z [B, d_u, d_u]}, {'sc': lambda_2 L_sc, 'adv': lambda_1 L_d})``, the
            losses present when switched on and ``r_source`` is given.
        """
        return self.features_and_losses(embeddings, tokens, r_source, r_negative)[:2]

    def features_and_losses(self, embeddings: torch.Tensor, tokens: TokenBatch,
                            r_source: torch.Tensor | None = None,
                            r_negative: torch.Tensor | None = None, consistency: bool = True
                            ) -> tuple[dict[int, torch.Tensor], dict[str, torch.Tensor],
                                       dict[str, torch.Tensor]]:
        """:meth:`forward`'s condition and losses, and the features they came from
        (:meth:`extract`'s). ``consistency=False`` leaves ``L_sc`` out: a caller that computes
        it itself over captions several modules read (:class:`PerLanguageDisentangler`'s
        batch-contrastive ``L_sc``) takes ``f^sr`` from the features.
        """
        found = self.extract(embeddings, tokens)
        condition = self.generator(torch.cat([found[f] for f in FEATURES if f in found], -1))
        losses: dict[str, torch.Tensor] = {}
        if r_source is None:
            return condition, losses, found
        if r_source.shape != (embeddings.shape[0], self.tower.embed_dim):
            raise ValueError(f'r_source has shape {tuple(r_source.shape)}, expected '
                             f'({embeddings.shape[0]}, {self.tower.embed_dim})')
        r_source = r_source.detach().to(embeddings.dtype)
        if self.consistency_loss is not None and consistency:
            losses['sc'] = self.loss_weights['sc'] * self.consistency(found['sr'], r_source)
        if self.discriminator is not None:
            if r_negative is None:
                r_negative = r_source[shuffled_negatives(embeddings.shape[0],
                                                         device=embeddings.device)]
            # The game is between F and the SDM: the reversed gradient stops at the SDM's input,
            # so the embedding block it shares with the target branch is not trained to hide
            # the caption's meaning (which L_CL needs). One more pass of the k frozen blocks.
            agnostic = (found['sa'] if self.adversarial_through_embeddings
                        else self.semantic_agnostic(embeddings.detach(), tokens))
            losses['adv'] = self.loss_weights['adv'] * self.discriminator.loss(
                reverse_gradient(agnostic), r_source, r_negative.detach().to(embeddings.dtype))
        return condition, losses, found
