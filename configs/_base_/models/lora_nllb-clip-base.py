# open_clip's NLLB-CLIP ('nllb-clip-base', tag 'v1'), frozen: NLLB-200's distilled 600M encoder
# (M2M100 pre-LN layers, the language-code token pooled, linear projection to 512) read block by
# block (docs/backbones.md), and a LoRA (r = 1, alpha = 16, as the XLM-R CLIP's) on the query and
# value projections of its 12 layers per target language. NLLB embeds every FLORES-200 language,
# so the branch reads its own frozen table (TowerTokenEmbedding) with NLLB's tokenizer, which
# writes each caption's language code (NLLBTokenizer); no disentangler.
_base_ = ['./pectvlm_lora.py']
nllb_clip_arch = 'nllb-clip-base'
nllb_tokenizer = dict(type='NLLBTokenizer', name_or_path='facebook/nllb-200-distilled-600M',
                      max_length=77)
target_languages = ['sw']
model = dict(
    type='CrossLingualRetriever',
    backbone=dict(type='OpenCLIPBackbone', arch=nllb_clip_arch, pretrained='v1',
                  tokenizer=nllb_tokenizer),
    language_branch=dict(_base_.pectvlm_branch, languages=target_languages,
                         tokenizer=nllb_tokenizer),
)
