"""A sentence-transformers folder's own pipeline, read from its files: the pooling of the last
hidden states, the ``Dense`` layers after it (LaBSE's tanh projection), whether the sentence
embedding is L2-normalised, how captions are read before tokenising (ends stripped, lower-cased
or not) and how many of their tokens are read, so that a teacher built on the folder embeds as
the model was trained (docs/custom_modules.md, "A text-only backbone: your own teacher")."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from xmr.json_files import load_json
from xmr.models.backbones.bert import BERT_MODEL_TYPES
from xmr.models.weight_files import check_weights_fit, read_weights

if TYPE_CHECKING:
    from xmr.models.backbones.bert import BertTextTower

__all__ = ['DenseLayer', 'SentenceTransformerPipeline', 'read_sentence_transformer']

#: ``1_Pooling/config.json``'s mode flags, each to the :attr:`TextTower.pooling
#: <xmr.models.backbones.base.TextTower.pooling>` that computes it (``None``: none does).
POOLING_MODES: dict[str, str | None] = {
    'pooling_mode_mean_tokens': 'mean', 'pooling_mode_cls_token': 'cls',
    'pooling_mode_max_tokens': None, 'pooling_mode_mean_sqrt_len_tokens': None,
    'pooling_mode_weightedmean_tokens': None, 'pooling_mode_lasttoken': None}
#: ``Dense/config.json``'s ``activation_function`` (the class sentence-transformers imports by
#: that name) to the module it is.
DENSE_ACTIVATIONS: dict[str, type[nn.Module]] = {
    'torch.nn.modules.linear.Identity': nn.Identity, 'torch.nn.modules.activation.Tanh': nn.Tanh,
    'torch.nn.modules.activation.ReLU': nn.ReLU, 'torch.nn.modules.activation.GELU': nn.GELU,
    'torch.nn.modules.activation.Sigmoid': nn.Sigmoid}


@dataclass(frozen=True)
class DenseLayer:
    """A ``Dense`` module of the folder: ``y = act(W x + b)``, ``W`` ``[out, in]``.

    Attributes:
        folder: its folder (``2_Dense``), holding ``config.json`` and its weights
            (``model.safetensors`` or ``pytorch_model.bin``: ``linear.weight``, ``linear.bias``).
        in_features, out_features: the widths it maps between.
        bias: whether ``linear`` has a bias.
        activation: ``activation_function``, a key of :data:`DENSE_ACTIVATIONS`.
    """

    folder: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str

    def build(self) -> nn.Sequential:
        """``Sequential(linear, activation)`` holding the folder's weights, checked whole (its
        keys are the ``Dense`` module's own: ``linear.weight``, ``linear.bias``)."""
        layer = nn.Sequential(OrderedDict(
            linear=nn.Linear(self.in_features, self.out_features, bias=self.bias),
            activation=DENSE_ACTIVATIONS[self.activation]()))
        weights = read_weights(self.folder, 'sentence-transformers Dense weights')
        check_weights_fit(layer.state_dict(), weights, str(self.folder),
                          f'the Dense layer its config.json describes ({self.in_features} -> '
                          f'{self.out_features}, bias={self.bias})',
                          'Save the module again with sentence-transformers.')
        layer.load_state_dict(weights)
        return layer


@dataclass(frozen=True)
class SentenceTransformerPipeline:
    """What a sentence-transformers folder does around its transformer.

    Attributes:
        pooling: ``'mean'`` (masked mean of the last states) or ``'cls'`` (the first token's).
        normalize: a ``Normalize`` module follows the pooling: ``r = p / ||p||_2``.
        lowercase: ``sentence_bert_config.json``'s ``do_lower_case``: captions are lower-cased
            before the tokenizer reads them.
        max_length: the tokens of a caption the model reads, its special tokens included (the
            rest is cut): ``sentence_bert_config.json``'s ``max_seq_length``, else, as
            sentence-transformers falls back, the smaller of ``config.json``'s
            ``max_position_embeddings`` and ``tokenizer_config.json``'s ``model_max_length``.
    """

    pooling: str
    normalize: bool
    lowercase: bool
    max_length: int
    dense: tuple[DenseLayer, ...] = ()

    def apply_to(self, tower: BertTextTower) -> None:
        """Make ``tower`` (built with ``embed_dim=None``) end as the folder's model does: its
        pooling, then the ``Dense`` layers as its frozen ``text_proj`` (``E`` their last
        ``out_features``), then the L2 normalisation if any."""
        tower.pooling, tower.normalize = self.pooling, self.normalize
        if self.dense:
            tower.text_proj = nn.Sequential(*(layer.build() for layer in self.dense))
            tower.embed_dim = self.dense[-1].out_features

    def tokenizer_cfg(self, tokenizer_file: str | Path, max_length: int | None = None
                      ) -> dict[str, Any]:
        """The ``HFTokenizer`` config that reads captions as the folder's ``Transformer``
        module does: each caption's ends stripped (sentence-transformers always strips them),
        lower-cased when :attr:`lowercase`, cut at ``max_length`` (default :attr:`max_length`).
        """
        return dict(type='HFTokenizer', tokenizer_file=str(tokenizer_file), strip=True,
                    lowercase=self.lowercase,
                    max_length=self.max_length if max_length is None else max_length)


def _json(path: Path) -> Any:
    """A JSON file of the folder.

    Raises:
        FileNotFoundError: there is none, naming it and what the folder holds.
        JSONFileError: it is not UTF-8 or no JSON that Python reads, naming it, the fault and
            its line and column (:func:`~xmr.json_files.load_json`).
    """
    if not path.is_file():
        raise FileNotFoundError(f'{path} not found: a sentence-transformers folder (saved by '
                                'SentenceTransformer.save) holds its transformer\'s '
                                'config.json, its modules in modules.json and its pooling in '
                                '<Pooling path>/config.json')
    return load_json(path)


def _pooling(path: Path, width: int) -> str:
    """The :attr:`TextTower.pooling` of a ``Pooling`` module's ``config.json``."""
    config = _json(path)
    chosen = [field for field in POOLING_MODES if config.get(field)]
    if len(chosen) != 1 or POOLING_MODES[chosen[0]] is None:
        raise ValueError(f'{path}: pooling modes {chosen or "none"} set; xmr runs exactly one '
                         'of pooling_mode_mean_tokens or pooling_mode_cls_token')
    if config.get('word_embedding_dimension', width) != width:
        raise ValueError(f"{path}: word_embedding_dimension={config['word_embedding_dimension']}"
                         f' but the transformer (config.json) has hidden_size={width}')
    return POOLING_MODES[chosen[0]]


def _dense(path: Path, width: int) -> DenseLayer:
    """The :class:`DenseLayer` of a ``Dense`` module's ``config.json``, taking ``width``."""
    config = _json(path / 'config.json')
    activation = config.get('activation_function', 'torch.nn.modules.activation.Tanh')
    if activation not in DENSE_ACTIVATIONS:
        raise ValueError(f'{path / "config.json"}: activation_function={activation!r}; xmr '
                         f'runs {", ".join(DENSE_ACTIVATIONS)}')
    if config.get('in_features') != width:
        raise ValueError(f'{path / "config.json"}: in_features={config.get("in_features")} but '
                         f'the module before it gives {width}')
    return DenseLayer(path, width, config['out_features'], bool(config.get('bias', True)),
                      activation)


def read_sentence_transformer(folder: str | Path) -> SentenceTransformerPipeline:
    """Read ``modules.json``, the ``Pooling`` and ``Dense`` modules' ``config.json`` and
    ``sentence_bert_config.json`` of a sentence-transformers folder.

    The folder must hold a BERT, RoBERTa or XLM-R transformer, one ``Pooling`` module in mean or
    CLS mode, any ``Dense`` layers (LaBSE: 768 -> 768, tanh) and at most a ``Normalize`` last:
    what a :class:`~xmr.models.backbones.bert.BertTextTower` (``embed_dim=None``) computes once
    :meth:`SentenceTransformerPipeline.apply_to` it. Anything else is refused here, naming the
    file and field, rather than embedding otherwise than the model was trained to.

    Raises:
        FileNotFoundError: ``modules.json`` or a module's ``config.json`` is missing.
        ValueError: a module, pooling mode, activation or ``model_type`` xmr does not run, a
            ``Dense`` of another input width than it is given, or a file that is not UTF-8 or
            no JSON Python reads (:class:`~xmr.json_files.JSONFileError`, naming the file, the
            fault and its place).
    """
    folder = Path(folder)
    transformer = _json(folder / 'config.json')
    model_type = transformer.get('model_type')
    if model_type not in BERT_MODEL_TYPES:
        raise ValueError(f'{folder / "config.json"}: model_type={model_type!r}; BertTextTower '
                         f'runs {", ".join(BERT_MODEL_TYPES)}')
    width = transformer['hidden_size']
    kinds = [(module['type'].rsplit('.', 1)[-1], module.get('path', ''))
             for module in _json(folder / 'modules.json')]
    names = [kind for kind, _ in kinds]
    normalize = names[-1] == 'Normalize'
    middle = names[2:len(names) - normalize]
    if names[:2] != ['Transformer', 'Pooling'] or any(name != 'Dense' for name in middle):
        raise ValueError(f'{folder / "modules.json"}: modules {names}; xmr runs Transformer, '
                         'Pooling, any Dense and an optional Normalize, in that order')
    dense: list[DenseLayer] = []
    for _, path in kinds[2:2 + len(middle)]:
        dense.append(_dense(folder / path, dense[-1].out_features if dense else width))
    settings_file = folder / 'sentence_bert_config.json'
    settings = _json(settings_file) if settings_file.is_file() else {}
    return SentenceTransformerPipeline(pooling=_pooling(folder / kinds[1][1] / 'config.json',
                                                        width),
                                       normalize=normalize,
                                       lowercase=bool(settings.get('do_lower_case', False)),
                                       max_length=settings.get('max_seq_length')
                                       or _fallback_max_length(folder, transformer),
                                       dense=tuple(dense))


def _fallback_max_length(folder: Path, transformer: dict) -> int:
    """sentence-transformers' ``max_seq_length`` where ``sentence_bert_config.json`` gives none:
    ``config.json``'s ``max_position_embeddings``, or ``tokenizer_config.json``'s
    ``model_max_length`` if smaller (transformers writes ``1e30`` there for "no limit")."""
    tokenizer_file = folder / 'tokenizer_config.json'
    tokenizer_limit = (_json(tokenizer_file).get('model_max_length') if tokenizer_file.is_file()
                       else None)
    limits = [transformer['max_position_embeddings'], tokenizer_limit or float('inf')]
    return int(min(limits))
