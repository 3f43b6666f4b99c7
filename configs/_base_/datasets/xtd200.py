# XTD200: XTD10's 1,000 COCO images with NLLB translations of their English captions into the
# FLORES-200 languages (visheratin/nllb-clip); a test set only. Prepare with
# tools/data/prepare_xtd200.py --languages ... (canonical codes: swh_Latn is `sw`, docs/data.md).
# The images are XTD10's, in the COCO folder. Pick the evaluated languages (the model must know
# each) with test_dataloader = dict(dataset=dict(languages=['en', 'sw'])).
_base_ = ['./eval_loaders.py']
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')

test_dataloader = dict(dataset=dict(
    type='RetrievalDataset', data_root='data', data_prefix=dict(media='mscoco/images'),
    ann_file='xtd200/annotations/xtd200_test.json', transform=media_transform))
test_evaluator = [dict(type='RetrievalMetric', protocol='xtd200', prefix='xtd200')]
