"""The target-language branch: trainable embedding block + frozen blocks with adapter slots."""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from xmr.datasets.languages import normalize_languages
from xmr.models.adapters.base import AdapterContext, BaseAdapter, check_tower_width
from xmr.models.adapters.grouped import LanguageMembership
from xmr.models.adapters.language_adapters import (
    LanguageAdapters,
    adapter_configs,
    check_adapter_config,
    join_rows,
)
from xmr.models.host_to_device import host_to_device
from xmr.models.language.embedding import EmbeddingBlock
from xmr.models.language.tokenizers import (
    BaseTokenizer,
    TokenBatch,
    build_tokenizer,
    check_max_length,
    check_padding,
)
from xmr.models.language.tower_weights import TowerWeights, unread_tower_weights
from xmr.models.unowned import hold_unowned
from xmr.registry import MODELS

if TYPE_CHECKING:
    from xmr.models.backbones.base import TextTower, TowerShape

#: The config key of the branch's embedding block, as messages name it.
EMBEDDING_KEY = 'model.language_branch.embedding'


def index_condition(condition: Any, index: torch.Tensor | slice) -> Any:
    """Select the samples ``index`` of a per-sample condition (tensor, or list/dict of them)."""
    if condition is None:
        return None
    if isinstance(condition, torch.Tensor):
        return condition[index]
    if isinstance(condition, (list, tuple)):
        return type(condition)(index_condition(c, index) for c in condition)
    if isinstance(condition, dict):
        return {k: index_condition(v, index) for k, v in condition.items()}
    raise TypeError(f'cannot split a condition of type {type(condition).__name__} by sample')


def select_tokens(tokens: TokenBatch, index: torch.Tensor | slice) -> TokenBatch:
    return TokenBatch(**{k: v[index] for k, v in tokens.items()})


def group_by_language(langs: Sequence[str]) -> tuple[list[int], dict[str, slice]]:
    """The batch order that makes each language's samples contiguous, and their rows in it.

    Stable: languages in the order of their first sample, samples in batch order.

    Returns:
        ``order`` (batch index of each sorted row) and ``{lang: rows}`` slices of the sorted
        batch.
    """
    members: dict[str, list[int]] = {}
    for index, lang in enumerate(langs):
        members.setdefault(lang, []).append(index)
    order: list[int] = []
    rows = {}
    for lang, indices in members.items():
        rows[lang] = slice(len(order), len(order) + len(indices))
        order.extend(indices)
    return order, rows


def _built_tokenizer(cfg: dict | BaseTokenizer, tower: TextTower, given_pad_to: int | None
                     ) -> BaseTokenizer:
    """The target tokenizer, padding to the context of a fixed-context tower unless the config
    pads otherwise, its captions no longer than the tower takes.

    For a fixed-context tower, a config without ``max_length`` keeps captions as long as the
    padded length and the tower's reserved positions allow (prompts lower it further:
    :meth:`TargetLanguageBranch._fit_fixed_context`), as the source tokenizer's defaults to the
    context: the class's own default (77) would exceed the ``pad_to`` filled in here.
    """
    if isinstance(cfg, BaseTokenizer):
        # The branch's own copy: it lowers max_length for prompt tokens, and a tokenizer given
        # built is often the backbone's (TowerTokenEmbedding's), whose source captions that
        # would cut too. Its vocabulary and backend stay shared (read only).
        tokenizer = copy.copy(cfg)
        if tower.fixed_context and tokenizer.pad_to != tower.context_length:
            raise ValueError(f'the target tokenizer pads to {tokenizer.pad_to}, but the text '
                             f'tower reads a fixed context of {tower.context_length} tokens: '
                             f'build it with pad_to={tower.context_length}, or give its config')
    else:
        if tower.fixed_context:
            pad_to = given_pad_to or tower.context_length
            fits = min(pad_to, tower.context_length) - tower.reserved_positions
            cfg = {'max_length': fits, **cfg, 'pad_to': pad_to}
        tokenizer = build_tokenizer(cfg, 'model.language_branch.tokenizer')
    check_max_length(tokenizer, 'the target language branch')
    if tokenizer.max_length > tower.max_tokens:
        raise ValueError(f'target tokenizer max_length {tokenizer.max_length} exceeds the '
                         f'text tower context length {tower.max_tokens}; set '
                         f'tokenizer.max_length <= {tower.max_tokens}')
    return tokenizer


def branch_blocks(num_blocks: int | None, tower: TextTower | TowerShape) -> int:
    """How many of ``tower``'s blocks the branch runs: ``num_blocks``, else all of them.

    Raises:
        ValueError: a count outside ``1..tower.num_blocks``, naming the key and the range.
    """
    runs = tower.num_blocks if num_blocks is None else num_blocks
    if not 1 <= runs <= tower.num_blocks:
        raise ValueError(f'model.language_branch.num_blocks={num_blocks} but the text tower has '
                         f'{tower.num_blocks} blocks; set it in 1..{tower.num_blocks}, or leave '
                         'it out for all of them')
    return runs


def _built_embedding(cfg: dict | None, tower: TextTower, tokenizer: BaseTokenizer
                     ) -> EmbeddingBlock:
    """The target embedding block, its width the tower's and its table the tokenizer's
    vocabulary and padding id unless the config says otherwise."""
    cfg = dict(cfg or dict(type='TargetEmbedding'))
    check_tower_width(EMBEDDING_KEY, cfg, tower.width)
    cfg.setdefault('width', tower.width)
    cfg.setdefault('vocab_size', tokenizer.vocab_size)
    cfg.setdefault('padding_idx', tokenizer.pad_id)
    embedding_cls = cfg['type'] if isinstance(cfg['type'], type) else MODELS.get(cfg['type'])
    if not (isinstance(embedding_cls, type) and issubclass(embedding_cls, EmbeddingBlock)):
        raise TypeError(f"embedding type {cfg['type']!r} must subclass xmr's "
                        'EmbeddingBlock (xmr.models.language.embedding)')
    if not embedding_cls.reads_tower and cfg['vocab_size'] < tokenizer.vocab_size:
        # Else a caption with a high id (CJK, say) stops the run hours in, and lower ids read
        # rows meant for another vocabulary.
        raise ValueError(f"{EMBEDDING_KEY}.vocab_size={cfg['vocab_size']} holds fewer rows than "
                         f'the target tokenizer has ids ({tokenizer.vocab_size}); leave it out '
                         "to take the tokenizer's size")
    return MODELS.build(cfg, default_args=dict(tower=tower) if embedding_cls.reads_tower
                        else None)


@MODELS.register_module()
class TargetLanguageBranch(nn.Module):
    """Encodes target-language captions into the frozen model's joint space.

    ``r^T = W_p · LN(x_EOS)`` where ``x`` runs through the embedding block (table, ``W_e``, CLIP
    positions) and the frozen text blocks, each followed by the language's adapters.

    Args:
        tower: the backbone's :class:`TextTower`; used, not owned (it is not registered as a
            submodule, so the frozen weights appear once, under the backbone).
        languages: target language codes, each with its own adapter set.
        tokenizer: ``TOKENIZERS`` config of the target tokenizer, or one built (the branch
            takes a copy, leaving it as it is: the backbone's may be given); for a
            fixed-context tower (:attr:`TextTower.fixed_context`, SigLIP) a config's ``pad_to``
            defaults to its context, and a built one must pad to it.
        embedding: ``MODELS`` config of the embedding block (default :class:`TargetEmbedding`);
            ``vocab_size`` and ``width`` are filled in from the tokenizer and the tower, and
            ``tower`` too when the class sets ``reads_tower`` (the tower's own embedding).
        adapters: adapter config(s), see :class:`LanguageAdapters`.
        num_blocks: how many of the tower's blocks the branch runs (all by default; DASD Table 9).
        tuned_weights: ``fnmatch`` patterns over the tower's parameter names; each language
            gets its own trainable copies of the matching weights (:class:`TowerWeights`, part
            of its module), used in place of the frozen ones for its captions: PECTVLM's
            LayerNorms and head, ``['*']`` for full fine-tuning. Weights the branch never reads
            are not copied (:func:`~xmr.models.language.tower_weights.unread_tower_weights`:
            the tower's token table beside an embedding with its own, the blocks past
            ``num_blocks``), and a pattern matching only such weights is refused.
    """

    given_by_builder = ('tower',)  # the retriever's text tower

    def __init__(self, tower: TextTower, languages: Sequence[str], tokenizer: dict | BaseTokenizer,
                 embedding: dict | None = None, adapters: dict | Sequence[dict] | None = None,
                 num_blocks: int | None = None, tuned_weights: Sequence[str] = ()) -> None:
        super().__init__()
        hold_unowned(self, 'tower', tower)
        if not languages:
            raise ValueError('the target-language branch needs at least one language')
        self.languages = normalize_languages(languages, 'TargetLanguageBranch languages')
        given_pad_to = (tokenizer.get('pad_to') if isinstance(tokenizer, dict)
                        else getattr(tokenizer, 'pad_to', None))
        # A built tokenizer's max_length counts as given: the branch does not change it.
        sets_max_length = not isinstance(tokenizer, dict) or 'max_length' in tokenizer
        self.tokenizer = _built_tokenizer(tokenizer, tower, given_pad_to)
        self.num_blocks = branch_blocks(num_blocks, tower)
        self.embedding = _built_embedding(embedding, tower, self.tokenizer)
        if self.embedding.reads_tower:
            check_padding(self.tokenizer, tower, 'the target-language branch',
                          'model.language_branch.tokenizer', 'target')
        linear_shapes = tower.linear_shapes()
        self.adapters = LanguageAdapters(self.languages, adapters, tower.width, self.num_blocks,
                                         linear_shapes, post_norm=tower.post_norm)
        for module in self.adapters.modules():
            if isinstance(module, BaseAdapter):
                module.attach(self.tokenizer, self.embedding)
        if tuned_weights:
            unread = unread_tower_weights(tower, self.num_blocks, self.embedding)
            for lang in self.languages:
                self.adapters.add_tower_weights(lang, TowerWeights(tower, tuned_weights, unread))
        if tower.fixed_context:
            self._fit_fixed_context(given_pad_to, sets_max_length)
        else:
            self._leave_room_for_prompts()

    @classmethod
    def check_tower(cls, cfg: Mapping[str, Any], tower: TextTower | TowerShape) -> None:
        """Refuse, from the branch's config and the tower's width and depth alone, what the
        build refuses with the same message: ``num_blocks`` beyond the tower's
        (:func:`branch_blocks`), an embedding or adapter ``width`` other than the tower's and
        adapter ``blocks`` beyond the branch's
        (:func:`~xmr.models.adapters.language_adapters.check_adapter_config`).
        :meth:`CrossLingualRetriever.check_config
        <xmr.models.retrievers.CrossLingualRetriever.check_config>` runs it as the config
        loads, on the shape the backbone's config gives
        (:meth:`~xmr.models.backbones.base.TextBackbone.text_tower_shape`).

        Args:
            cfg: the branch's config.
            tower: the text tower, or its :class:`~xmr.models.backbones.base.TowerShape`.
        """
        num_blocks = branch_blocks(cfg.get('num_blocks'), tower)
        check_tower_width(EMBEDDING_KEY, cfg.get('embedding'), tower.width)
        for adapter in adapter_configs(cfg.get('adapters')):
            if isinstance(adapter, Mapping) and 'type' in adapter:
                check_adapter_config(adapter, tower.width, num_blocks)

    def _num_prompt_tokens(self) -> int:
        """Tokens the input-site adapters (prompts) insert into every caption; every language
        places the same adapter configs, so one language gives the count."""
        return sum(module.num_tokens for module in self.adapters.input_adapters(self.languages[0]))

    def _leave_room_for_prompts(self) -> None:
        """Lower the tokenizer's ``max_length`` so that a caption with the prompt tokens
        input-site adapters insert still fits the tower's context: a caption kept at a
        ``max_length`` that fills the context would stop the run mid-way at the positions.

        Raises:
            ValueError: prompts that leave fewer than two tokens of the context for a caption,
                or a ``pad_to`` beyond the room they leave (every batch would overflow).
        """
        num_prompt = self._num_prompt_tokens()
        room = self.tower.max_tokens - num_prompt
        self._check_prompt_room(num_prompt, room)
        pad_to = self.tokenizer.pad_to
        if pad_to is not None and pad_to > room:
            prompts = f' with the {num_prompt} prompt tokens' if num_prompt else ''
            raise ValueError(f'target tokenizer pad_to {pad_to}{prompts} exceeds the text tower '
                             f'context length {self.tower.max_tokens}; set '
                             f'model.language_branch.tokenizer.pad_to <= {room}')
        self.tokenizer.max_length = min(self.tokenizer.max_length, room)

    def _check_prompt_room(self, num_prompt: int, room: int) -> None:
        """Refuse prompts that leave ``room`` < 2 positions for a caption (its start and end
        tokens)."""
        if num_prompt and room < 2:
            raise ValueError(f'{num_prompt} prompt tokens leave {room} of the '
                             f'{self.tower.max_tokens}-token context for a caption (its start '
                             'and end tokens need 2): use fewer prompt tokens')

    def _fit_fixed_context(self, given_pad_to: int | None, sets_max_length: bool) -> None:
        """Pad the captions of a fixed-context tower so that, with the prompt tokens input-site
        adapters insert, every sequence is exactly the tower's context (docs/backbones.md).

        Args:
            given_pad_to: the config's ``pad_to``, or ``None``.
            sets_max_length: the config gives ``max_length`` (or the tokenizer is built); else
                it is lowered to what the prompt tokens leave, as on other towers
                (:meth:`_leave_room_for_prompts`).

        Raises:
            ValueError: a ``pad_to`` other than the context less the prompt tokens, a given
                ``max_length`` that does not fit, or prompts that leave no room for a caption;
                each names the numbers.
        """
        context = self.tower.context_length
        num_prompt = self._num_prompt_tokens()
        length = context - num_prompt
        with_prompts = f' less {num_prompt} prompt tokens' if num_prompt else ''
        if given_pad_to is not None and given_pad_to != length:
            raise ValueError(f'target tokenizer pad_to={given_pad_to} but the text tower pools a '
                             f'fixed position of its {context}-token context{with_prompts} '
                             f'(SigLIP-style): set tokenizer.pad_to={length} or leave it out '
                             '(docs/backbones.md)')
        room = length - self.tower.reserved_positions
        if not sets_max_length:
            self._check_prompt_room(num_prompt, room)
            self.tokenizer.max_length = min(self.tokenizer.max_length, room)
        if self.tokenizer.max_length > room:
            reserved = self.tower.reserved_positions
            also = f' and {reserved} position(s) the tower fills itself' if reserved else ''
            raise ValueError(f'target tokenizer max_length {self.tokenizer.max_length} does not '
                             f'fit the {context}-token context{with_prompts}{also}; set '
                             f'tokenizer.max_length <= {room}')
        self.tokenizer.pad_to = length

    def tokenize(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> TokenBatch:
        """The branch tokenizer on ``texts``, each in its language ``langs`` (see
        :meth:`~xmr.models.language.tokenizers.BaseTokenizer.__call__`)."""
        return self.tokenizer(texts, langs)

    def read(self, tokens: TokenBatch) -> TokenBatch:
        """The batch as the branch and the disentangler read it: where the embedding block
        embeds with the tower's own table (:attr:`~xmr.models.language.embedding.
        EmbeddingBlock.reads_tower`, :class:`TowerTokenEmbedding`), as the tower's own forward
        reads the source path's (:meth:`~xmr.models.backbones.base.TextTower.read_tokens`: a
        caption's own padding id masked); else as the tokenizer gives it, its ids another
        vocabulary's, which the tower's id rules do not name."""
        return self.tower.read_tokens(tokens) if self.embedding.reads_tower else tokens

    def embed(self, tokens: TokenBatch) -> torch.Tensor:
        """``[B, L]`` ids -> ``[B, L, D]`` embeddings with the tower's positions added: those
        of the source path for the tower's own ids
        (:meth:`~xmr.models.backbones.base.TextTower.add_token_positions`), by index for
        another vocabulary's."""
        x = self.embedding(tokens['input_ids'])
        if self.embedding.reads_tower:
            return self.tower.add_token_positions(x, tokens)
        return self.tower.add_positions(x)

    def membership(self, langs: Sequence[str], device: torch.device
                   ) -> LanguageMembership | None:
        """The batch's languages, checked; as a :class:`LanguageMembership` in the configured
        order of languages where every site of theirs runs all of them in one call (more than
        one language, every site grouped: :meth:`encode` then needs no order of samples), else
        ``None``.

        Raises:
            KeyError: for a language without adapters, naming the configured ones.
        """
        present = list(dict.fromkeys(langs))
        for lang in present:
            self.adapters.check_language(lang)
        if len(present) < 2 or not self.adapters.groups_every_site(present):
            return None
        return LanguageMembership(langs, device, order=self.languages)

    def encode(self, embeddings: torch.Tensor, tokens: TokenBatch, langs: Sequence[str],
               condition: Any = None, membership: LanguageMembership | None = None
               ) -> torch.Tensor:
        """Run the blocks on the batch, each sample with its language's adapters.

        The frozen blocks run once for the whole batch. Where every site serves all languages
        in one call (:class:`~xmr.models.adapters.grouped.GroupedAdapter`, DASD's dynamic
        adapters), the batch runs as it comes. Otherwise it is sorted by language (stably), so
        that each language's samples are contiguous, and each site calls each language's
        adapters on its rows (:class:`~xmr.models.adapters.language_adapters.LanguageHooks`).
        Languages with their own tower weights run the tower one at a time, their embedding
        included. Input-site adapters (prompts) act before the positions are
        added, so that the positions cover the lengthened sequence: each language re-embeds its
        samples from their tokens through its own.

        Args:
            embeddings: ``[B, L, D]`` output of :meth:`embed`.
            tokens: the batch's :class:`TokenBatch` as :meth:`read` gives it.
            langs: language of each sample (``B`` codes).
            condition: per-sample condition for conditioned adapters (DASD's ``W^z``), indexed
                along its first dimension.
            membership: :meth:`membership` of ``langs``, made beforehand (a compiled step reads
                it, not ``langs``); ``None``: made here.

        Returns:
            ``[B, E]`` unnormalised ``r^T``, in the batch's order.
        """
        batch, codes = embeddings.shape[0], len(langs if membership is None else membership)
        if codes != batch:
            raise ValueError(f'{codes} language codes for a batch of {batch}')
        if membership is None:
            membership = self.membership(langs, embeddings.device)
        if membership is not None:
            # Every site serves all languages in one call: no order of samples is needed.
            return self._encode_run(embeddings, tokens, condition, membership.languages, None,
                                    reembed=False, membership=membership)
        order, rows = group_by_language(langs)
        sort = (None if order == sorted(order)
                else host_to_device(torch.tensor(order), embeddings.device))
        if sort is not None:
            embeddings, tokens = embeddings[sort], select_tokens(tokens, sort)
            condition = index_condition(condition, sort)
        sorted_langs = [langs[index] for index in order]
        alone = any(self.adapters.tower_weights(lang) is not None for lang in rows)
        runs = ([(span, {lang: slice(None)}) for lang, span in rows.items()] if alone
                else [(slice(None), rows)])
        outputs = []
        for span, run_rows in runs:
            tower_weights = self.adapters.tower_weights(next(iter(run_rows))) if alone else None
            with (nullcontext() if tower_weights is None
                  else tower_weights.swapped_into(self.tower)):
                outputs.append(self._encode_run(
                    embeddings[span], select_tokens(tokens, span),
                    index_condition(condition, span), sorted_langs[span], run_rows,
                    reembed=alone))
        out = join_rows(outputs)
        return out if sort is None else out.new_empty(out.shape).index_copy(0, sort, out)

    def _encode_run(self, x: torch.Tensor, tokens: TokenBatch, condition: Any,
                    langs: Sequence[str], rows: dict[str, slice] | None,
                    reembed: bool, membership: LanguageMembership | None = None
                    ) -> torch.Tensor:
        """Samples ``x [b, L, D]`` -> ``[b, E]``, in one pass of the blocks.

        Args:
            langs: the languages of the samples (each sample's, or each once).
            rows: each language's samples, contiguous and in order; ``None`` when every site
                serves all languages in one call
                (:meth:`~xmr.models.adapters.language_adapters.LanguageAdapters.groups_every_site`),
                the samples then in any order, ``membership`` saying each one's language.
            reembed: embed the samples again from their tokens (a language with its own tower
                weights, swapped in, embeds with them).
        """
        contexts = [AdapterContext(lang=lang, condition=index_condition(condition, span),
                                   attention_mask=tokens['attention_mask'][span],
                                   eos_index=tokens['eos_index'][span], rows=span)
                    for lang, span in (rows or {}).items()]
        if contexts and self.adapters.input_adapters(contexts[0].lang):
            x = self.tower.add_positions(join_rows([
                self._prompted(tokens['input_ids'][ctx.rows], ctx) for ctx in contexts]))
        elif reembed:
            x = self.embed(tokens)
        mask, eos_index = ((join_rows([ctx.attention_mask for ctx in contexts]),
                            join_rows([ctx.eos_index for ctx in contexts])) if contexts
                           else (tokens['attention_mask'], tokens['eos_index']))
        packed = (self.tower.packing(mask)
                  if all(self.adapters.accepts_packed_tokens(lang) for lang in set(langs))
                  else None)
        for ctx in contexts:
            ctx.packed, ctx.rows = ((packed, ctx.rows) if packed is None or len(contexts) == 1
                                    else packed.samples(ctx.rows))
        grouped = (None if len(contexts) == 1 else AdapterContext(
            lang='+'.join(dict.fromkeys(langs)), condition=condition, attention_mask=mask,
            eos_index=eos_index, packed=packed,
            membership=(LanguageMembership(langs, x.device) if membership is None
                        else membership)))
        x = self.tower.encode_embeddings(x, mask,
                                         hooks=self.adapters.hooks(*contexts, grouped=grouped),
                                         blocks=range(self.num_blocks), packed=packed)
        return self.tower.head(self.tower.pool(x, mask, eos_index))

    def _prompted(self, input_ids: torch.Tensor, ctx: AdapterContext) -> torch.Tensor:
        """``[b, L]`` ids -> ``[b, L', D]`` embeddings through ``ctx.lang``'s input-site adapters,
        which may lengthen them and update ``ctx``'s mask and pooled positions."""
        x = self.embedding(input_ids)
        for adapter in self.adapters.input_adapters(ctx.lang):
            x = adapter(x, ctx)
            if x.shape[:2] != ctx.attention_mask.shape[:2]:
                # Unchecked, packing read each later caption's tokens at the wrong positions
                # (an embedding that changed with its batch), and padding failed in attention.
                raise ValueError(f'input adapter {type(adapter).__name__} ({ctx.lang}) returned '
                                 f'{tuple(x.shape[:2])} tokens for a mask of '
                                 f'{tuple(ctx.attention_mask.shape[:2])}: an adapter that '
                                 'lengthens the sequence updates ctx.attention_mask and '
                                 'ctx.eos_index too (docs/custom_modules.md)')
        return x

    def forward(self, tokens: TokenBatch, langs: Sequence[str],
                condition: Any = None) -> torch.Tensor:
        """Tokens -> ``[B, E]`` ``r^T`` (embedding block, blocks with adapters, head)."""
        tokens = self.read(tokens)
        return self.encode(self.embed(tokens), tokens, langs, condition)
