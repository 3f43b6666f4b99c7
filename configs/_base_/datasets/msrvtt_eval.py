# Multi-MSRVTT's evaluation, shared by its Cross-lingual Finetune and Zero-shot settings: model
# selection on the 1,990 held-out videos (9k list minus 7k list) queried with their machine
# translations into the eight target languages; test on the 1k-A clips with the Multi-MSRVTT
# captions, text->video R@1 per language and their sum (t2v_R@1_sum). Each video gives 12
# uniformly sampled frames (random offset in training, segment centre in evaluation), encoded as
# images and mean-pooled by the model; another count is the num_frames of each video loader's
# dataset (train, source finetune, val, test). A damaged video stops the run and names the file;
# on_corrupt='skip' skips it with a warning instead, and the runtime's CorruptMediaHook logs the
# count and the files after each validation and test, and every 1,000 iterations. Prepare
# with tools/data/prepare_msrvtt.py, then translate and attach the val captions
# (tools/data/export_source_captions.py, tools/data/attach_translations.py).
_base_ = ['./eval_loaders.py']
data_root = 'data/msrvtt'
data_prefix = dict(media='videos')
target_langs = ['de', 'fr', 'cs', 'zh', 'ru', 'vi', 'sw', 'es']
eval_langs = ['en', *target_langs]
on_corrupt = 'raise'
media_transform = dict(type='MediaTransform', backbone='ViT-B-32', pretrained='openai')


def _videos(ann_file, **options):
    return dict(batch_size=32, dataset=dict(
        type='RetrievalDataset', data_root=data_root, data_prefix=data_prefix,
        ann_file=ann_file, num_frames=12, on_corrupt=on_corrupt,
        transform=media_transform, **options))


val_dataloader = _videos('annotations/msrvtt_val.json', languages=['en'],
                         translated_languages=target_langs)
test_dataloader = _videos('annotations/msrvtt_test1ka.json', languages=eval_langs)
val_evaluator = dict(type='RetrievalMetric', protocol='text_to_video')
test_evaluator = val_evaluator
