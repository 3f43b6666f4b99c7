# Multi-MSRVTT, Zero-shot setting: train on CC300K images (English Conceptual Captions with UC2's
# machine translations; of Multi-MSRVTT's languages they cover de, fr, cs and zh -- attach machine
# translations into ru, vi, sw, es with tools/data/attach_translations.py and extend
# target_langs), never on MSRVTT; select on the held-out MSRVTT videos (9k minus 7k) queried with
# machine translations, test on the 1k-A clips (text->video R@1). 12 frames per video as in
# msrvtt_clft.py; on_corrupt='skip' plus dict(type='CorruptMediaHook') skips damaged videos.
_base_ = ['./cc300k_train.py']
data_root = 'data/msrvtt'
data_prefix = dict(media='videos')
target_langs = ['de', 'fr', 'cs', 'zh']
eval_langs = ['en', 'de', 'fr', 'cs', 'zh', 'ru', 'vi', 'sw', 'es']
num_frames = 12
on_corrupt = 'raise'


def _videos(ann_file, **options):
    return dict(batch_size=32, dataset=dict(
        type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
        ann_file=ann_file, num_frames=num_frames, on_corrupt=on_corrupt,
        transform=_base_.media_transform, **options))


train_dataloader = dict(dataset=dict(target_langs=target_langs))
text_train_dataloader = dict(dataset=dict(target_langs=target_langs))
val_dataloader = _videos('annotations/msrvtt_val.json', languages=['en'],
                         translated_languages=target_langs)
test_dataloader = _videos('annotations/msrvtt_test1ka.json', languages=eval_langs)
