# Multi-MSRVTT, Cross-lingual Finetune setting: the 7k training videos' English captions with
# their machine translations into the eight target languages (MT(DTD), docs/data.md); model
# selection on the 1,990 held-out videos (9k list minus 7k list) queried with their machine
# translations; test on the 1k-A clips with the Multi-MSRVTT captions (text->video R@1).
# Each video gives 12 uniformly sampled frames (random offset in training, segment centre in
# evaluation), encoded as images and mean-pooled by the model. A damaged video stops the run and
# names the file; on_corrupt='skip' skips it with a warning instead -- add
# dict(type='CorruptMediaHook') to custom_hooks to get the count per epoch.
# Prepare with tools/data/prepare_msrvtt.py, then translate and attach the train and val captions
# (tools/data/export_source_captions.py, tools/data/attach_translations.py).
_base_ = ['./loaders.py']
data_root = 'data/msrvtt'
data_prefix = dict(media='videos')
target_langs = ['de', 'fr', 'cs', 'zh', 'ru', 'vi', 'sw', 'es']
eval_langs = ['en', 'de', 'fr', 'cs', 'zh', 'ru', 'vi', 'sw', 'es']
num_frames = 12
on_corrupt = 'raise'
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _train_captions(**options):
    """The 7k training videos' captions; ``options`` pick what a loader reads of them."""
    return dict(type='CaptionPairDataset', data_root=data_root, data_prefix=data_prefix,
                ann_file='annotations/msrvtt_train7k.json', transform=media_transform,
                **options)


def _videos(ann_file, **options):
    return dict(batch_size=32, dataset=dict(
        type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
        ann_file=ann_file, num_frames=num_frames, on_corrupt=on_corrupt,
        transform=media_transform, **options))


train_dataloader = dict(dataset=_train_captions(target_langs=target_langs,
                                                num_frames=num_frames, on_corrupt=on_corrupt))
text_train_dataloader = dict(
    _base_.train_dataloader, num_workers=2,
    dataset=_train_captions(target_langs=target_langs, with_media=False))
# The 140,200 English captions of the 7k training videos at batch 128 give 1,095 iterations per
# epoch (drop_last), 5,475 in DASD's 5 epochs of the source finetune.
source_finetune_dataloader = dict(
    _base_.train_dataloader,
    dataset=_train_captions(source_only=True, num_frames=num_frames, on_corrupt=on_corrupt))
val_dataloader = _videos('annotations/msrvtt_val.json', languages=['en'],
                         translated_languages=target_langs)
test_dataloader = _videos('annotations/msrvtt_test1ka.json', languages=eval_langs)
