# Flickr30k-200: the 1,000 images of Flickr30K's 1K test with NLLB translations of one English
# caption each into the FLORES-200 languages (visheratin/nllb-clip); a test set only. Prepare
# with tools/data/prepare_flickr30k_200.py --languages ... (docs/data.md). The images are the
# flickr30k-images/ folder Multi30K uses. Pick the evaluated languages (the model must know each)
# with test_dataloader = dict(dataset=dict(languages=['en', 'sw'])).
_base_ = ['./eval_loaders.py']
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')

test_dataloader = dict(dataset=dict(
    type='RetrievalDataset', data_root='data/multi30k', data_prefix=dict(media='flickr30k-images'),
    ann_file='annotations/flickr30k_200_test.json', transform=media_transform))
test_evaluator = [dict(type='RetrievalMetric', protocol='flickr30k_200', prefix='flickr30k_200')]
