"""Tiny random open_clip models of each family, built from the family's own open_clip config.

Each config is ``open_clip.get_model_config(<family's architecture>)`` with its widths, depths
and image size scaled down and everything that makes the family what it is kept: SigLIP's
bidirectional tower, ``pool_type='last'``, ``proj_bias``, fixed 64-token context, LayerNorm
``eps=1e-6`` (and SigLIP 2's tanh GELU); MobileCLIP's bidirectional tower; the XLM-R CLIP's
Hugging Face encoder, pooler and projection. Vision towers are scaled the same way: open_clip
ViTs keep their class, SigLIP's timm ViT becomes a 2-block ``map``-pooled timm ViT registered
here. XLM-R-tokenised families embed XLM-R's 250,002 ids (the tokenizer in ``shared/data``);
NLLB-CLIP reads a tiny tokenizer in NLLB's layout written here (:func:`nllb_tokenizer_folder`).
:func:`shrunk_cfg` does the same for any architecture open_clip lists, its Hugging Face encoder
standing in as the tiny one of its model type.
"""
from __future__ import annotations

import copy
import functools
import json
import string
from pathlib import Path

import open_clip
from timm.models import register_model
from timm.models.vision_transformer import VisionTransformer

from tests.conftest import SHARED_DATA

TINY_SIGLIP_VIT = 'vit_xmr_tiny_patch8_siglip_32'
XLMR_TOKENIZER = SHARED_DATA / 'tokenizers' / 'xlm-roberta.tokenizer.json'
XLMR_VOCAB = 250002
TEXTS = ['A red circle!', 'two blue squares on the left of a big green triangle', 'x']


@register_model
def vit_xmr_tiny_patch8_siglip_32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """SigLIP's timm ViT (no class token, attention-pool ``map`` head) at 2 blocks of width 32."""
    for key in ('pretrained_cfg', 'pretrained_cfg_overlay', 'cache_dir'):
        kwargs.pop(key, None)
    args = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                class_token=False, global_pool='map')
    args.update(kwargs)
    return VisionTransformer(**args)


TINY_VIT = dict(image_size=32, layers=2, width=32, patch_size=8, head_width=16)
TINY_TEXT = dict(width=32, heads=2, layers=2)


def _scaled(arch: str, text: dict | None = None, timm_vision: bool = False,
            text_sizes: dict | None = TINY_TEXT) -> dict:
    """``arch``'s config at ``embed_dim`` 32 with a tiny vision tower; ``text_sizes`` ``None``
    for a Hugging Face text tower, whose sizes are its encoder config's."""
    cfg = copy.deepcopy(open_clip.get_model_config(arch))
    cfg['embed_dim'] = 32
    if timm_vision:
        cfg['vision_cfg'].update(timm_model_name=TINY_SIGLIP_VIT, image_size=32)
    else:
        cfg['vision_cfg'] = dict(TINY_VIT)
    cfg['text_cfg'].update({**(text_sizes or {}), **(text or {})})
    if 'multimodal_cfg' in cfg:  # CoCa: its attention-pooled image tower, a tiny decoder
        cfg['vision_cfg'].update(attentional_pool=True, attn_pooler_heads=2, output_tokens=True)
        cfg['multimodal_cfg'].update(width=32, heads=2, layers=1, attn_pooler_heads=2)
    return cfg


def clip_cfg(**text) -> dict:
    """OpenAI-style CLIP (ViT-B-32): causal tower, argmax pooling, matrix projection."""
    return _scaled('ViT-B-32', dict(context_length=32, **text))


def siglip_cfg(arch: str = 'ViT-B-16-SigLIP', **text) -> dict:
    """SigLIP / SigLIP 2 (CustomTextCLIP): bidirectional, last of 64 tokens, Linear with bias."""
    return _scaled(arch, {'vocab_size': XLMR_VOCAB, **text}, timm_vision=True)


def mobileclip_cfg(**text) -> dict:
    """MobileCLIP-S1's text tower (CustomTextCLIP, bidirectional, no padding mask)."""
    return _scaled('MobileCLIP-S1', dict(context_length=32, **text))


def coca_cfg() -> dict:
    """CoCa (coca_ViT-B-32): appended class token (embed_cls), attention-pooled image tower,
    a captioning decoder xmr builds and never runs."""
    cfg = _scaled('coca_ViT-B-32', dict(context_length=31))
    cfg['multimodal_cfg']['context_length'] = 31
    return cfg


def xlmr_encoder(folder: Path, width: int = 32, model_type: str = 'xlm-roberta') -> Path:
    """A 2-layer XLM-R (``'roberta'``: RoBERTa, ``'bert'``: BERT) encoder config written to
    ``folder``, over XLM-R's ids (no download)."""
    from transformers import BertConfig, RobertaConfig, XLMRobertaConfig

    config_cls = {'xlm-roberta': XLMRobertaConfig, 'roberta': RobertaConfig,
                  'bert': BertConfig}[model_type]
    # Padding id 1 for all three, so that XLM-R's tokenizer pads as the encoder expects.
    config_cls(vocab_size=XLMR_VOCAB, hidden_size=width, num_hidden_layers=2,
               num_attention_heads=2, intermediate_size=64, max_position_embeddings=40,
               pad_token_id=1, bos_token_id=0, eos_token_id=2).save_pretrained(folder)
    return folder


def xlmr_cfg(folder: Path, pooler: str = 'mean_pooler', proj: str | None = 'mlp',
             width: int = 32, model_type: str = 'xlm-roberta') -> dict:
    """xlm-roberta-base-ViT-B-32 (``roberta-ViT-B-32`` with ``model_type='roberta'``, a BERT
    encoder with ``'bert'``) with a 2-layer encoder written to ``folder`` (no download)."""
    arch = 'roberta-ViT-B-32' if model_type == 'roberta' else 'xlm-roberta-base-ViT-B-32'
    return _scaled(arch, dict(hf_model_name=str(xlmr_encoder(folder, width, model_type)),
                              hf_pooler_type=pooler, hf_proj_type=proj, context_length=32),
                   text_sizes=None)


def mt5_encoder(folder: Path, feed_forward_proj: str = 'gated-gelu') -> Path:
    """A 2-block mT5 encoder config (gated GELU, relative positions) written to ``folder``; its
    ids and padding id are XLM-R's so that the shared tokenizer fits. Its heads span
    4 x 4 = 16 of the 32 widths, as mt5-small's span 6 x 64 = 384 of 512: q/k/v and the
    attention output have a width of their own. ``feed_forward_proj='relu'`` gives T5's plain
    FFN, ``wo(relu(wi h))``, instead of mT5's gated one."""
    from transformers import MT5Config

    MT5Config(vocab_size=XLMR_VOCAB, d_model=32, d_kv=4, num_heads=4, d_ff=48, num_layers=2,
              num_decoder_layers=1, feed_forward_proj=feed_forward_proj,
              relative_attention_num_buckets=8,
              relative_attention_max_distance=16, pad_token_id=1, eos_token_id=2,
              decoder_start_token_id=1).save_pretrained(folder)
    return folder


def mt5_cfg(folder: Path, pooler: str = 'mean_pooler', proj: str | None = 'mlp',
            feed_forward_proj: str = 'gated-gelu') -> dict:
    """mt5-base-ViT-B-32 with :func:`mt5_encoder`'s encoder written to ``folder``."""
    return _scaled('mt5-base-ViT-B-32',
                   dict(hf_model_name=str(mt5_encoder(folder, feed_forward_proj)),
                        hf_pooler_type=pooler, hf_proj_type=proj, context_length=32),
                   text_sizes=None)


#: The tiny NLLB tokenizer's pieces, one per character: ``'▁'`` is id 4, ``'a'`` 5 ... ``'z'`` 30,
#: ``'A'`` 31 ... ``'Z'`` 56, then ``! . , '`` 57-60; the FLORES-200 codes follow from id 61 in
#: NLLB's order (``deu_Latn`` 102, ``eng_Latn`` 107, ``fra_Latn`` 117, ``swh_Latn`` 228) and
#: ``<mask>`` is last (263), as in NLLB's 256,204 ids.
NLLB_PIECES = ['▁', *string.ascii_letters, *"!.,'"]
NLLB_VOCAB = 264


def nllb_tokenizer_folder(folder: Path) -> Path:
    """A tiny tokenizer in NLLB's layout (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, the
    pieces, the FLORES-200 language codes as special tokens, ``<mask>``), written to ``folder``
    by transformers' own ``NllbTokenizer`` (``tokenizer.json`` and its config). Its pieces are
    single characters without merges, so that ids are computable by hand (:data:`NLLB_PIECES`).
    """
    from transformers import NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    tokens = ['<s>', '<pad>', '</s>', '<unk>', *NLLB_PIECES, *FAIRSEQ_LANGUAGE_CODES, '<mask>']
    NllbTokenizer(vocab={token: index for index, token in enumerate(tokens)},
                  merges=[]).save_pretrained(folder)
    return folder


def nllb_encoder(folder: Path, scale_embedding: bool = True) -> Path:
    """A 2-layer M2M100 encoder config (NLLB's ReLU, scaled embeddings unless told) and the
    tiny NLLB tokenizer, written to ``folder`` (no download). Its decoder's heads and FFN width
    differ from the encoder's, so that a tower reading the decoder's sizes fails."""
    from transformers import M2M100Config

    M2M100Config(vocab_size=NLLB_VOCAB, d_model=32, encoder_layers=2, decoder_layers=1,
                 encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=48,
                 decoder_ffn_dim=40, max_position_embeddings=40, activation_function='relu',
                 scale_embedding=scale_embedding, pad_token_id=1, bos_token_id=0,
                 eos_token_id=2, decoder_start_token_id=2).save_pretrained(folder)
    return nllb_tokenizer_folder(folder)


def nllb_cfg(folder: Path, arch: str = 'nllb-clip-base', pooler: str = 'cls_pooler',
             proj: str | None = 'linear', scale_embedding: bool = True) -> dict:
    """``nllb-clip-base`` (``nllb-clip-base-siglip``: its timm SigLIP ViT) with
    :func:`nllb_encoder`'s encoder and tokenizer in ``folder``; the pooler and projection are
    the config's own unless given."""
    folder = str(nllb_encoder(folder, scale_embedding))
    return _scaled(arch, dict(hf_model_name=folder, hf_tokenizer_name=folder,
                              hf_pooler_type=pooler, hf_proj_type=proj, context_length=32),
                   timm_vision='siglip' in arch, text_sizes=None)


def siglip_t5_tokenizer_folder(folder: Path) -> Path:
    """A SigLIP (v1, i18n) tokenizer folder as open_clip's ``SigLipTokenizer`` writes the
    ``timm/`` ones: a T5 vocabulary (``<pad>`` = 0, ``</s>`` = 1, ``<unk>`` = 2, 30 pieces of
    :data:`~tests.conftest.CORPUS`) whose padding is set to ``</s>``."""
    import io

    import sentencepiece
    from transformers import T5TokenizerFast

    from tests.conftest import CORPUS

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20), model_writer=model, vocab_size=48, pad_id=0,
        eos_id=1, unk_id=2, bos_id=-1, minloglevel=2, num_threads=1)
    pieces = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = [(pieces.id_to_piece(i), pieces.get_score(i)) for i in range(pieces.get_piece_size())]
    tokenizer = T5TokenizerFast(vocab=vocab, extra_ids=0)
    tokenizer.pad_token_id = tokenizer.eos_token_id = 1
    tokenizer.save_pretrained(folder)
    return folder


def xlmr_tokenizer(**overrides) -> dict:
    """XLM-R's lone tokenizer.json, padding with its ``<pad>`` (1), which the
    ``tokenizer_config.json`` of its snapshot would name."""
    return dict(type='HFTokenizer', tokenizer_file=str(XLMR_TOKENIZER),
                **{'pad_id': 1, **overrides})


def backbone_cfg(model_cfg: dict, tokenizer: dict | None = None) -> dict:
    cfg = dict(type='OpenCLIPBackbone', arch=None, model_cfg=model_cfg)
    if tokenizer is not None:
        cfg['tokenizer'] = tokenizer
    return cfg


def gemma_snapshot(folder, captions, post_processor: str, **config):
    """A SigLIP 2 snapshot's layout built with ``tokenizers``: Gemma's specials (``<pad>`` 0,
    ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3, ``<mask>`` 4), the 256 byte-fallback pieces, BPE
    merges learned from ``captions``, spaces written as ``▁``, the given post-processor
    (``'$A <eos>'``), and a ``tokenizer_config.json`` of the real key names (``config``
    overrides them; one given as ``None`` is left out)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    specials = ['<pad>', '<eos>', '<bos>', '<unk>', '<mask>',
                *(f'<0x{byte:02X}>' for byte in range(256))]
    tokenizer = Tokenizer(models.BPE(unk_token='<unk>', fuse_unk=True, byte_fallback=True))
    tokenizer.normalizer = normalizers.Replace(' ', '\u2581')
    tokenizer.decoder = decoders.Sequence([decoders.Replace('\u2581', ' '),
                                           decoders.ByteFallback(), decoders.Fuse()])
    tokenizer.train_from_iterator([caption.lower() for caption in captions], trainers.BpeTrainer(
        vocab_size=1500, special_tokens=specials, limit_alphabet=300, show_progress=False))
    tokenizer.post_processor = processors.TemplateProcessing(
        single=post_processor, special_tokens=[('<bos>', 2), ('<eos>', 1)])
    folder.mkdir()
    tokenizer.save(str(folder / 'tokenizer.json'))
    fields = {'tokenizer_class': 'GemmaTokenizer', 'bos_token': '<bos>', 'eos_token': '<eos>',
              'pad_token': '<pad>', 'unk_token': '<unk>', 'mask_token': '<mask>',
              'padding_side': 'right', 'model_max_length': 64, **config}
    (folder / 'tokenizer_config.json').write_text(json.dumps(
        {key: value for key, value in fields.items() if value is not None}))
    return folder


#: The Hugging Face text encoders open_clip's architectures name (``text_cfg.hf_model_name``),
#: which cannot be fetched offline, and the tiny encoder of the same model type that stands for
#: each (:func:`xlmr_encoder`, :func:`mt5_encoder`, :func:`nllb_encoder`).
HF_ENCODER_STAND_INS = {
    'xlm-roberta-base': 'xlm-roberta', 'xlm-roberta-large': 'xlm-roberta',
    'roberta-base': 'roberta', 'google/mt5-base': 'mt5', 'google/mt5-xl': 'mt5',
    'facebook/nllb-200-distilled-600M': 'nllb', 'facebook/nllb-200-distilled-1.3B': 'nllb'}
#: The vocabulary each source tokenizer stand-in fills: open_clip's bundled CLIP BPE, XLM-R's
#: file, the tiny T5 vocabulary of :func:`siglip_t5_tokenizer_folder` (``</s>`` = 1, the end id
#: of mT5's tokenizer that ``ViT-L-14-worldwide`` pools).
STAND_IN_VOCABS = {'clip-bpe': 49408, 'xlm-roberta': XLMR_VOCAB, 't5': 64}


def shrunk_cfg(arch: str) -> tuple[dict, str] | None:
    """``arch``'s own open_clip config with only its sizes shrunk, and the source tokenizer
    that stands for its own (a :data:`STAND_IN_VOCABS` key, ``'nllb'`` for NLLB's).

    Every structural field (``text_cfg``'s pooling, masks, activation and norm arguments, ids,
    projection, ``context_length``; ``quick_gelu``, ``custom_text``, ``multimodal_cfg``, which
    pick the model class) is kept; ``width``, ``heads``, ``layers`` and ``vocab_size`` (the
    stand-in tokenizer's) shrink, the image tower is a tiny ViT, and a Hugging Face encoder's
    name becomes its :data:`HF_ENCODER_STAND_INS` kind (its ``context_length`` the stand-in's
    32 positions), which :func:`built_shrunk_cfg` writes. ``None``: a Hugging Face encoder
    without a stand-in.
    """
    cfg = _scaled(arch, text_sizes=None)
    text = cfg['text_cfg']
    if 'hf_model_name' in text:
        kind = HF_ENCODER_STAND_INS.get(text['hf_model_name'])
        if kind is None:
            return None
        text.update(hf_model_name=kind, context_length=32)
        return cfg, 'nllb' if kind == 'nllb' else 'xlm-roberta'
    # ViT-L-14-worldwide pools mT5's </s> (eos_id 1); the other Hugging Face vocabularies
    # (SigLIP's, Gemma's, XLM-V's, BERT's for CLIPA) stand in as XLM-R's, whose </s> is 2.
    tokenizer = ('clip-bpe' if 'hf_tokenizer_name' not in text else
                 't5' if text.get('pool_type') == 'eos' and text.get('eos_id') == 1 else
                 'xlm-roberta')
    text.update(TINY_TEXT, vocab_size=STAND_IN_VOCABS[tokenizer])
    if 'multimodal_cfg' in cfg:
        cfg['multimodal_cfg']['vocab_size'] = text['vocab_size']
    return cfg, tokenizer


def built_shrunk_cfg(cfg: dict, tokenizer: str, folder: Path) -> tuple[dict, dict | None]:
    """``(model_cfg, source tokenizer cfg)`` of a :func:`shrunk_cfg`, its stand-in encoder and
    tokenizer files written to ``folder``; ``None``: the record's tokenizer."""
    cfg = copy.deepcopy(cfg)
    text = cfg['text_cfg']
    kind = text.get('hf_model_name')
    if kind is not None:
        encoder = {'xlm-roberta': xlmr_encoder, 'mt5': mt5_encoder, 'nllb': nllb_encoder,
                   'roberta': functools.partial(xlmr_encoder, model_type='roberta')}[kind]
        text['hf_model_name'] = str(encoder(folder))
        if kind == 'nllb':
            text['hf_tokenizer_name'] = text['hf_model_name']
    if tokenizer == 't5':
        file = siglip_t5_tokenizer_folder(folder) / 'tokenizer.json'
        return cfg, dict(type='HFTokenizer', tokenizer_file=str(file))
    return cfg, xlmr_tokenizer() if tokenizer == 'xlm-roberta' else None
