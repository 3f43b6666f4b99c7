# Crossmodal-3600 (XM3600): 3,600 images with human captions in 36 languages, many of them low
# resource (sw, te, mi, quz, bn, ...); a test set only, so there is no training or validation
# loader here. Prepare with tools/data/prepare_crossmodal3600.py (docs/data.md).
# Two protocols score the one pass over the images (docs/evaluation.md):
#   crossmodal3600/...     every caption of each image (1-2 per language)
#   crossmodal3600_cb/...  the first caption of each image, CLIP_benchmark's convention; this is
#                          what `tools/test.py --format clip_benchmark` exports.
# The model must know every evaluated language: pick them with
#   test_dataloader = dict(dataset=dict(languages=['en', 'sw']))
_base_ = ['./eval_loaders.py']
data_root = 'data/crossmodal3600'
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')

test_dataloader = dict(dataset=dict(
    type='RetrievalDataset', data_root=data_root, data_prefix=dict(media='images'),
    ann_file='annotations/crossmodal3600_test.json', transform=media_transform))
test_evaluator = [
    dict(type='RetrievalMetric', protocol='crossmodal3600', prefix='crossmodal3600'),
    dict(type='RetrievalMetric', protocol='crossmodal3600_first_caption',
         prefix='crossmodal3600_cb'),
]
