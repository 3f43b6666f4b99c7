"""A post-LN BERT text encoder written out block by block: the tower CCLM, M-CLIP and open_clip's
Hugging Face text encoders share."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.adapters.base import AdapterSite
from xmr.models.backbones.base import (
    SiteHooks,
    TextTower,
    block_linear_shapes,
    linear_site,
    position_ids,
    residual_site,
    with_qkv_delta,
)
from xmr.models.language.packed_tokens import PackedTokens

__all__ = ['BERT_MODEL_TYPES', 'BertTextTower', 'build_bert']

#: Hugging Face ``model_type`` values whose encoders :class:`BertTextTower` runs: BERT's post-LN
#: layers, with BERT's positions (``bert``) or RoBERTa's (``roberta``, ``xlm-roberta``).
BERT_MODEL_TYPES = ('bert', 'roberta', 'xlm-roberta')


def build_bert(text: dict) -> nn.Module:
    """A transformers ``BertModel`` (no pooler) from ``text``: the sizes of
    :data:`~xmr.models.backbones.cclm.CCLM_TEXT` (``hidden_size``, ``num_layers``, ...)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=text['vocab_size'], hidden_size=text['hidden_size'],
        num_hidden_layers=text['num_layers'], num_attention_heads=text['num_heads'],
        intermediate_size=text['intermediate_size'], hidden_act=text['hidden_act'],
        max_position_embeddings=text['max_position_embeddings'],
        type_vocab_size=text['type_vocab_size'], layer_norm_eps=text['layer_norm_eps'],
        pad_token_id=text['pad_token_id'],
        # CCLM's towers are frozen: no dropout, whatever mode a caller leaves them in.
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertModel(config, add_pooling_layer=False)


class BertTextTower(TextTower):
    """A post-LN BERT encoder (BERT, RoBERTa, XLM-R layers) run layer by layer with adapter sites.

    CCLM's six text-only layers, M-CLIP's XLM-R and open_clip's Hugging Face towers are this
    tower; subclasses set the pooling and the position offset.

    Each post-LN layer is written out on the weights of transformers' ``BertLayer``:
    ``x = LN_1(x + attn(x))``, ``x = LN_2(x + W_2 gelu(W_1 x))``, so that adapters can act on the
    q/k/v and output projections and on each sub-layer's output before its residual add. In
    training mode (a tower a phase trains: CDDS's BERT) the layers' own dropout acts where
    ``BertLayer``'s does (on the embeddings, the attention weights and each sub-layer's output
    before its adapter site); a frozen tower runs in eval mode, without it.

    A ``RobertaModel`` / ``XLMRobertaModel`` (a sentence encoder such as multilingual-e5) is
    read with its own positions: when the embeddings have a ``padding_idx``,
    :attr:`position_offset` becomes ``pad_id + 1`` and :attr:`position_pad_id` ``pad_id``, as
    Hugging Face numbers them from the ids.

    Args:
        bert: a ``BertModel`` (or ``RobertaModel`` / ``XLMRobertaModel``) whose embeddings and
            layers are used (not copied).
        embed_dim: width ``E`` of ``text_proj``; ``None`` builds no projection (a sentence
            encoder whose embedding is the pooled hidden state, ``E = D``).

    Attributes:
        normalize: the head ends in an L2 normalisation, ``r = h / ||h||_2`` (a
            sentence-transformers folder whose modules end in ``Normalize``,
            :func:`~xmr.models.backbones.sentence_transformers.read_sentence_transformer`), so
            that ``r^S`` and the branch's ``r^T`` are the model's own sentence embeddings.
    """

    causal = False
    post_norm = True
    pooling = 'cls'
    #: first position id of a sequence (see :meth:`add_positions`).
    position_offset = 0
    normalize = False

    def __init__(self, bert: nn.Module, embed_dim: int | None) -> None:
        super().__init__()
        config = bert.config
        self.embeddings = bert.embeddings
        self.layers = bert.encoder.layer
        self.width = config.hidden_size
        self.text_proj = nn.Linear(self.width, embed_dim) if embed_dim is not None else None
        self.embed_dim = embed_dim if embed_dim is not None else self.width
        self.num_blocks = len(self.layers)
        position_type = getattr(config, 'position_embedding_type', None) or 'absolute'
        if position_type != 'absolute':
            raise TypeError(f'{type(bert).__name__}: config.position_embedding_type='
                            f'{position_type!r} - BertTextTower runs absolute position '
                            'embeddings only')
        # RoBERTa's and XLM-R's embeddings (a padding_idx; BERT's have none) number real tokens
        # from pad_id + 1, so fewer positions remain for text.
        padding_idx = getattr(self.embeddings, 'padding_idx', None)
        if padding_idx is not None:
            self.position_offset = padding_idx + 1
            self.position_pad_id = padding_idx
        self.context_length = config.max_position_embeddings - self.position_offset
        self.num_heads = config.num_attention_heads
        self.intermediate_size = config.intermediate_size
        self.vocab_size = config.vocab_size

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings.word_embeddings(input_ids)

    def token_table_module(self) -> nn.Module:
        return self.embeddings.word_embeddings

    def block_module(self, index: int) -> nn.Module:
        return self.layers[index]

    def add_positions(self, x: torch.Tensor,
                      attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``LN(x + type_0 + pos)``: BERT's embedding sum and its LayerNorm, ``[B, L, D]``.

        Positions are numbered from :attr:`position_offset`: 0 for BERT (CCLM's encoder), by
        index; ``pad_id + 1`` for RoBERTa / XLM-R, which count the real tokens of
        ``attention_mask`` only (:func:`~xmr.models.backbones.base.position_ids`: a token read
        as padding takes row ``pad_id`` and later tokens keep their count, as Hugging Face
        derives them from the ids); without a mask, by index. The single token type (0) is part
        of every token's embedding.
        """
        length = self.checked_length(x)
        token_type = self.embeddings.token_type_embeddings.weight[0]
        table = self.embeddings.position_embeddings.weight
        rows = position_ids(length, self.position_offset, attention_mask, table.device)
        return self.embeddings.dropout(self.embeddings.LayerNorm(x + token_type + table[rows]))

    def _self_attention(self, index: int, x: torch.Tensor,
                        mask: torch.Tensor | PackedTokens | None,
                        hooks: SiteHooks | None) -> torch.Tensor:
        """``softmax(q k^T / sqrt(d) + mask) v`` with the q/k/v deltas of ``attn.qkv``."""
        attention = self.layers[index].attention.self
        q, k, v = with_qkv_delta(attention.query(x), attention.key(x), attention.value(x), x,
                                 hooks, index)
        return self.attend(q, k, v, mask, attention.dropout.p if attention.training else 0.0)

    def run_block(self, index: int, x: torch.Tensor, mask: torch.Tensor | PackedTokens | None,
                  hooks: SiteHooks | None = None) -> torch.Tensor:
        """One post-LN BERT layer with its adapter sites.

        Args:
            index: layer index.
            x: ``[B, L, D]`` hidden states, or ``[T, D]`` packed tokens.
            mask: additive attention bias ``[B, 1, L, L]`` from :meth:`build_mask`, or the
                batch's :class:`PackedTokens` when ``x`` is packed.
            hooks: adapter hooks or ``None``.

        Returns:
            ``x``'s shape.
        """
        layer = self.layers[index]
        context = self._self_attention(index, x, mask, hooks)
        h = layer.attention.output.dropout(linear_site(
            context, layer.attention.output.dense, hooks, AdapterSite.ATTN_OUT, index))
        x = layer.attention.output.LayerNorm(
            residual_site(h, hooks, AdapterSite.ATTN_OUTPUT, index) + x)

        h = linear_site(x, layer.intermediate.dense, hooks, AdapterSite.MLP_FC, index)
        h = layer.intermediate.intermediate_act_fn(h)
        h = layer.output.dropout(linear_site(h, layer.output.dense, hooks, AdapterSite.MLP_PROJ,
                                             index))
        x = layer.output.LayerNorm(residual_site(h, hooks, AdapterSite.MLP_OUTPUT, index) + x)
        return residual_site(x, hooks, AdapterSite.BLOCK_OUTPUT, index)

    def extra_repr(self) -> str:
        """The tower's reading attributes and :attr:`normalize`, which changes the features a
        cache keys too."""
        return f'{super().extra_repr()}, normalize={self.normalize}'

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``r = text_proj(x_CLS)`` (``x_CLS`` itself without a projection), divided by its L2
        norm when :attr:`normalize` (every token's, for token-level outputs); BERT is post-LN,
        so there is no final norm."""
        r = pooled if self.text_proj is None else self.text_proj(pooled)
        return F.normalize(r, dim=-1) if self.normalize else r

    def linear_shapes(self) -> dict[AdapterSite, tuple[int, int]]:
        """``(in_features, out_features)`` of the frozen projection at each linear site."""
        return block_linear_shapes(self.width, self.intermediate_size)
