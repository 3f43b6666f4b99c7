# open_clip's multilingual XLM-R CLIP ('xlm-roberta-base-ViT-B-32', tag 'laion5b_s13b_b90k'),
# frozen: XLM-R base (mean pooler, MLP projection to 512) read block by block as a BERT-style
# tower (docs/backbones.md), and a LoRA (r = 1, alpha = 16, PECTVLM's setting) on the query and
# value projections of its 12 layers per target language. XLM-R already embeds every language,
# so the branch reads its own frozen table (TowerTokenEmbedding) with XLM-R's tokenizer; no
# disentangler.
_base_ = ['./pectvlm_lora.py']
xlmr_clip_arch = 'xlm-roberta-base-ViT-B-32'
# open_clip's cleaning of this tower's captions (ftfy, HTML entities, whitespace), for the
# branch's target captions too.
xlmr_tokenizer = dict(type='HFTokenizer', name_or_path='xlm-roberta-base', max_length=77,
                      clean='whitespace')
target_languages = ['sw']
model = dict(
    type='CrossLingualRetriever',
    backbone=dict(type='OpenCLIPBackbone', arch=xlmr_clip_arch, pretrained='laion5b_s13b_b90k',
                  tokenizer=xlmr_tokenizer),
    language_branch=dict(_base_.pectvlm_branch, languages=target_languages,
                         tokenizer=xlmr_tokenizer),
)
