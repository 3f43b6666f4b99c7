"""The settings of an xmr model that computes what MLA's / DASD's code computes.

A converted file only has the authors' weights; what the model does with them is the config's.
Settings that hold no parameter (an activation, the SDM's depth, the padding) cannot be told
from the file, so a config that differs there converts and computes something else. Each check
here returns ``(setting, the config's value, the authors' value)`` for every difference:

* both: QuickGELU in every MLP of both CLIP towers (OpenAI's weights;
  ``clip/model.py``'s ``ResidualAttentionBlock``); captions cut at the 77 positions and read
  as they are; the branch runs every text block, each followed by the language's acquirer at
  the block output and nothing else;
* MLA: the acquirer is ``x + c_proj(ReLU(c_fc(x)))`` (``StaticAdapter``), no SDM;
* DASD: ``x + c_proj2(ReLU(c_fc(x) W))`` (``DynamicAdapter``); one SDM for the languages
  (``per_language=False``) over the first two frozen blocks (``inputlayers=1`` stops after
  block index 1) without its adapters, ``f^sa`` the mean over all 77 positions of captions
  padded to 77 (``padding='max_length'``), ``z = QuickGELU(Linear([f^sr; f^sa]))``; their
  ``multilingual_embedding`` has no ``padding_idx``: the padding's row, which ``f^sa``
  reads, trains as any other (xmr's default keeps it frozen).
"""
from __future__ import annotations

from torch import nn

from xmr.models.adapters.base import AdapterSite
from xmr.models.adapters.dynamic import DynamicAdapter
from xmr.models.adapters.static import StaticAdapter
from xmr.models.disentanglers.parameter_generator import QuickGELU
from xmr.models.disentanglers.semantics import SemanticsDisentangler
from xmr.models.language.embedding import TargetEmbedding
from xmr.models.retrievers.cross_lingual import CrossLingualRetriever

#: ``(setting, config's value, authors' value)``.
Difference = tuple[str, object, object]

#: The acquirer each method places after every block.
ACQUIRERS = {'mla': StaticAdapter, 'dasd': DynamicAdapter}

#: SDM settings of DASD's code: ``{attribute: (config key, authors' value)}``.
DASD_SDM = {'depth': ('depth', 2), 'padding_as_tokens': ('padding_as_tokens', True),
            'features': ('features', ('sr', 'sa'))}


def backbone_differences(model: nn.Module) -> list[Difference]:
    """QuickGELU in the CLIP towers: the activation of the first MLP that has another one."""
    clip = getattr(model.backbone, 'clip', None)
    if clip is None:
        return [('model.backbone.type', type(model.backbone).__name__, 'OpenCLIPBackbone')]
    gelu = next((name for name, module in clip.named_modules()
                 if isinstance(module, nn.GELU)), None)
    if gelu is None:
        return []
    return [('model.backbone.arch', f'{model.backbone.arch} (nn.GELU at {gelu})',
             'an arch with QuickGELU, e.g. ViT-B-16-quickgelu or ViT-B-32-quickgelu')]


def tokenizer_differences(branch: nn.Module) -> list[Difference]:
    """Their ``m_toker(texts, max_length=77, truncation=True)``: captions cut at the context,
    read as they are (mBERT cased: no lower-casing, no cleaning)."""
    tokenizer, context = branch.tokenizer, branch.tower.context_length
    found = []
    if tokenizer.max_length != context:
        found.append(('model.language_branch.tokenizer.max_length', tokenizer.max_length,
                      context))
    for option, theirs in (('lowercase', False), ('clean', None)):
        if getattr(tokenizer, option, theirs) != theirs:
            found.append((f'model.language_branch.tokenizer.{option}',
                          getattr(tokenizer, option), theirs))
    return found


def branch_differences(model: nn.Module, method: str) -> list[Difference]:
    """Their embedding block (table, ``W_e``), every text block followed by the method's
    acquirer at its output, nothing else."""
    branch = model.language_branch
    if branch is None:
        return [('model.language_branch', None, 'a TargetLanguageBranch')]
    found = []
    if type(branch.embedding) is not TargetEmbedding:
        found.append(('model.language_branch.embedding.type', type(branch.embedding).__name__,
                      'TargetEmbedding'))
    if branch.num_blocks != branch.tower.num_blocks:
        found.append(('model.language_branch.num_blocks', branch.num_blocks,
                      branch.tower.num_blocks))
    found += tokenizer_differences(branch)
    site = str(AdapterSite.BLOCK_OUTPUT).replace('.', '_')
    wanted = {f'{block}:{site}' for block in range(branch.num_blocks)}
    placed = branch.adapters.sets[branch.languages[0]]
    kinds = sorted({f'{type(module).__name__} at {key}' for key, module in placed.items()
                    if key not in wanted or not isinstance(module, ACQUIRERS[method])})
    if kinds or set(placed) != wanted:
        found.append(('model.language_branch.adapters', ', '.join(kinds) or
                      f'{len(placed)} adapters', f'{ACQUIRERS[method].__name__} at the output '
                      f'of each of the {branch.num_blocks} blocks, nothing else'))
    return found


def dasd_sdm_differences(model: nn.Module) -> list[Difference]:
    """One shared SDM of two blocks, no stream adapters, padding as tokens, QuickGELU ``z``."""
    sdm = getattr(model, 'disentangler', None)
    if not isinstance(sdm, SemanticsDisentangler):
        return [('model.disentangler', type(sdm).__name__ if sdm is not None else None,
                 'SemanticsDisentangler with per_language=False')]
    found = [(f'model.disentangler.{key}', getattr(sdm, attribute), value)
             for attribute, (key, value) in DASD_SDM.items() if getattr(sdm, attribute) != value]
    # A stream whose feature the config leaves out (features=['sr']) has no adapters at all.
    if any(getattr(sdm, f'{stream}_adapters', None) is not None for stream in ('sr', 'sa')):
        found.append(('model.disentangler.stream_adapters', True, False))
    if not isinstance(sdm.generator.to_z[-1], QuickGELU):
        found.append(('model.disentangler.generator.activation',
                      type(sdm.generator.to_z[-1]).__name__, 'quick_gelu'))
    branch = model.language_branch
    padding = getattr(getattr(branch.embedding, 'table', None), 'padding_idx', None)
    if padding is not None:  # their f^sa reads the padding's row, which they train
        found.append(('model.language_branch.embedding.padding_idx', padding, None))
    if branch.tokenizer.pad_to != branch.tower.context_length:
        found.append(('model.language_branch.tokenizer.pad_to', branch.tokenizer.pad_to,
                      branch.tower.context_length))
    return found


def authors_differences(model: nn.Module, method: str) -> list[Difference]:
    """Every setting of ``model`` whose computation differs from ``method``'s code; a model
    that is no :class:`CrossLingualRetriever` (CDDS's ``DualEncoderRetriever``) is that alone:
    it has no target branch whose settings could be compared."""
    if not isinstance(model, CrossLingualRetriever):
        return [('model.type', type(model).__name__, CrossLingualRetriever.__name__)]
    found = backbone_differences(model) + branch_differences(model, method)
    sdm = getattr(model, 'disentangler', None)
    if method == 'mla' and sdm is not None:
        found.append(('model.disentangler', type(sdm).__name__, None))
    if method == 'dasd':
        found += dasd_sdm_differences(model)
    return found
