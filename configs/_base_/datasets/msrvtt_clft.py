# Multi-MSRVTT, Cross-lingual Finetune setting: the 7k training videos' English captions with
# their machine translations into the eight target languages (MT(DTD), docs/data.md), 12 frames
# a video; evaluated as msrvtt_eval.py says. Prepare with tools/data/prepare_msrvtt.py, then
# translate and attach the train and val captions (tools/data/export_source_captions.py,
# tools/data/attach_translations.py).
_base_ = ['./train_loaders.py', './msrvtt_eval.py']


def _train_captions(**options):
    """The 7k training videos' captions; ``options`` pick what a loader reads of them."""
    return dict(type='CaptionPairDataset', data_root=_base_.data_root,
                data_prefix=_base_.data_prefix, ann_file='annotations/msrvtt_train7k.json',
                transform=_base_.media_transform, **options)


train_dataloader = dict(dataset=_train_captions(
    target_langs=_base_.target_langs, num_frames=_base_.num_frames,
    on_corrupt=_base_.on_corrupt))
text_train_dataloader = dict(
    _base_.train_dataloader, num_workers=2,
    dataset=_train_captions(target_langs=_base_.target_langs, with_media=False))
# The 140,200 English captions of the 7k training videos at batch 128 give 1,095 iterations per
# epoch (drop_last), 5,475 in DASD's 5 epochs of the source finetune.
source_finetune_dataloader = dict(
    _base_.train_dataloader,
    dataset=_train_captions(source_only=True, num_frames=_base_.num_frames,
                            on_corrupt=_base_.on_corrupt))
