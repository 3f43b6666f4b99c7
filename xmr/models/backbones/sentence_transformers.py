"""A sentence-transformers folder's own pipeline, read from its files: the pooling of the last
hidden states, whether the sentence embedding is L2-normalised, how captions are read before
tokenising (ends stripped, lower-cased or not) and how many of their tokens are read, so that a
teacher built on the folder embeds as the model was trained (docs/custom_modules.md, "A
text-only backbone: your own teacher")."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmr.json_files import load_json

__all__ = ['SentenceTransformerPipeline', 'read_sentence_transformer']

#: ``1_Pooling/config.json``'s mode flags, each to the :attr:`TextTower.pooling
#: <xmr.models.backbones.base.TextTower.pooling>` that computes it (``None``: none does).
POOLING_MODES: dict[str, str | None] = {
    'pooling_mode_mean_tokens': 'mean', 'pooling_mode_cls_token': 'cls',
    'pooling_mode_max_tokens': None, 'pooling_mode_mean_sqrt_len_tokens': None,
    'pooling_mode_weightedmean_tokens': None, 'pooling_mode_lasttoken': None}
#: Model types whose layers :class:`~xmr.models.backbones.bert.BertTextTower` writes out.
BERT_MODEL_TYPES = ('bert', 'roberta', 'xlm-roberta')


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


def read_sentence_transformer(folder: str | Path) -> SentenceTransformerPipeline:
    """Read ``modules.json``, the ``Pooling`` module's ``config.json`` and
    ``sentence_bert_config.json`` of a sentence-transformers folder.

    The folder must hold a BERT, RoBERTa or XLM-R transformer, one ``Pooling`` module in mean or
    CLS mode and at most a ``Normalize`` after it: what a :class:`~xmr.models.backbones.bert.
    BertTextTower` (``embed_dim=None``) computes. Anything else is refused here, naming the file
    and field, rather than embedding otherwise than the model was trained to.

    Raises:
        FileNotFoundError: ``modules.json`` or the pooling's ``config.json`` is missing.
        ValueError: a module, pooling mode or ``model_type`` xmr does not run, or a file
            that is not UTF-8 or no JSON Python reads (:class:`~xmr.json_files.JSONFileError`,
            naming the file, the fault and its place).
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
    if names not in (['Transformer', 'Pooling'], ['Transformer', 'Pooling', 'Normalize']):
        raise ValueError(f'{folder / "modules.json"}: modules {names}; xmr runs Transformer, '
                         'Pooling and an optional Normalize, in that order')
    settings_file = folder / 'sentence_bert_config.json'
    settings = _json(settings_file) if settings_file.is_file() else {}
    return SentenceTransformerPipeline(pooling=_pooling(folder / kinds[1][1] / 'config.json',
                                                        width),
                                       normalize=names[-1] == 'Normalize',
                                       lowercase=bool(settings.get('do_lower_case', False)),
                                       max_length=settings.get('max_seq_length')
                                       or _fallback_max_length(folder, transformer))


def _fallback_max_length(folder: Path, transformer: dict) -> int:
    """sentence-transformers' ``max_seq_length`` where ``sentence_bert_config.json`` gives none:
    ``config.json``'s ``max_position_embeddings``, or ``tokenizer_config.json``'s
    ``model_max_length`` if smaller (transformers writes ``1e30`` there for "no limit")."""
    tokenizer_file = folder / 'tokenizer_config.json'
    tokenizer_limit = (_json(tokenizer_file).get('model_max_length') if tokenizer_file.is_file()
                       else None)
    limits = [transformer['max_position_embeddings'], tokenizer_limit or float('inf')]
    return int(min(limits))
