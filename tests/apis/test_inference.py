"""xmr.apis: strict checkpoint loading, language checks, text/media embeddings as in evaluation."""
from __future__ import annotations

import copy
import itertools
import logging
import os
import pickle
import re
import types

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.logging import HistoryBuffer, MMLogger
from PIL import Image
from torch.utils.data import DataLoader

from tests.conftest import TINY_CLIP, tiny_backbone_cfg, tiny_branch_cfg, tiny_retriever_cfg
from xmr.apis import (
    CheckpointMismatchError,
    NoMediaReadError,
    check_config_languages,
    check_languages,
    encode_media,
    encode_readable_media,
    encode_texts,
    init_retriever,
    load_trained_checkpoint,
    trained_languages,
)
from xmr.datasets import (
    Annotation,
    MediaRecord,
    MediaSkippedWarning,
    dump_annotation,
    retrieval_collate,
)
from xmr.datasets.media_io import MediaReadError
from xmr.registry import DATASETS, MODELS, UnknownOptionError
from xmr.utils.cli import UserError, UserKeyError
from xmr.version import provenance

TINY = dict(type='MediaTransform', backbone=None, size=32)


def write_config(path, **model_overrides) -> str:
    Config(dict(model=tiny_retriever_cfg(**model_overrides))).dump(path)
    return str(path)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """A config file, a checkpoint of a model whose branch moved away from its init, the model."""
    root = tmp_path_factory.mktemp('apis')
    torch.manual_seed(0)
    model = MODELS.build(tiny_retriever_cfg())
    with torch.no_grad():
        for parameter in model.language_branch.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    torch.save({'meta': {'iter': 7}, 'state_dict': model.state_dict()}, root / 'tiny.pth')
    return write_config(root / 'tiny.py'), root / 'tiny.pth', model.eval()


def test_init_retriever_loads_every_weight(trained):
    config, checkpoint, reference = trained
    torch.manual_seed(1)  # a different random init, overwritten by the checkpoint
    model = init_retriever(config, checkpoint)
    assert not model.training and model.cfg.model.type == 'CrossLingualRetriever'
    expected = reference.state_dict()
    loaded = model.state_dict()
    assert loaded.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(loaded[key], value), key
    assert trained_languages(model) == ['en', 'de', 'zh']


def test_the_api_builds_from_xmrs_registries_whatever_scope_the_process_is_in(trained):
    """Another library's runner (MMEngine's own: scope 'mmengine') left the process in its
    scope: the model and the media transform were looked up there, and not found."""
    from mmengine.registry import DefaultScope

    config, checkpoint, _ = trained
    with DefaultScope.overwrite_default_scope('mmengine'):
        model = init_retriever(config, checkpoint)
        media = encode_media(model, [torch.zeros(3, 32, 32, dtype=torch.uint8)])
        assert DefaultScope.get_current_instance().scope_name == 'mmengine'
    assert media.shape == (1, model.backbone.embed_dim)


def test_an_option_replaces_a_list_item_as_cfg_options_does(trained):
    """MMEngine's merge failed on a list's item that is no dict ('str' object has no attribute
    'copy')."""
    config, _, _ = trained
    model = init_retriever(config, cfg_options={'model.language_branch.languages.1': 'fr'})
    assert trained_languages(model) == ['en', 'de', 'fr']
    assert model.cfg.model.language_branch.languages == ['de', 'fr']


@pytest.mark.parametrize('overrides, message', [
    (dict(language_branch=tiny_branch_cfg(languages=('de', 'fr'))),
     r"languages: checkpoint \['de', 'zh'\] vs config \['de', 'fr'\]"),
    (dict(backbone={**tiny_backbone_cfg(), 'model_cfg': {**TINY_CLIP, 'embed_dim': 48}}),
     'embed_dim: checkpoint 32 vs config 48'),
    (dict(language_branch=tiny_branch_cfg(adapters=dict(type='StaticAdapter', hidden=4))),
     r'keys of other shapes: language_branch\.adapters'),
    # The same weights under QuickGELU compute other features: the record is no weight.
    (dict(backbone=tiny_backbone_cfg(pretrained_cfg=dict(quick_gelu=True))),
     r"backbone_settings: checkpoint \"…21073\)\), \('quick_gelu', False\), \('resize_mode', "
     r"'sho…\" vs config \"…21073\)\), \('quick_gelu', True\), \('resize_mode', 'sho…\""),
], ids=['languages', 'embed_dim', 'adapter_shape', 'backbone_record'])
def test_mismatched_checkpoint_names_the_mismatch(trained, tmp_path, overrides, message):
    _, checkpoint, _ = trained
    config = write_config(tmp_path / 'other.py', **overrides)
    with pytest.raises(CheckpointMismatchError, match=f'(?s)checkpoint {checkpoint}.* does not '
                       f'match the config: .*{message}'):
        init_retriever(config, checkpoint)


def test_a_checkpoint_with_keys_this_model_lacks_names_the_xmr_that_wrote_it(trained, tmp_path):
    """A newer xmr's file was refused naming the unexpected key alone; the fixture's file, which
    records no xmr, is told as such."""
    _, checkpoint, model = trained
    config = write_config(tmp_path / 'other.py')
    newer = tmp_path / 'newer.pth'
    torch.save(dict(meta=dict(iter=7, xmr_version='0.2.0', xmr_commit='0123abc'),
                    state_dict=dict(model.state_dict(), **{'language_branch.gate': torch.ones(1)})),
               newer)
    with pytest.raises(CheckpointMismatchError) as error:
        init_retriever(config, newer)
    assert '1 keys the model does not have: language_branch.gate' in str(error.value)
    assert ('\n(the checkpoint was written by xmr 0.2.0 (commit 0123abc); read by xmr '
            f"{provenance()['xmr_version']} (") in str(error.value)
    shallower = write_config(tmp_path / 'shallower.py', language_branch=tiny_branch_cfg(
        adapters=dict(type='StaticAdapter', hidden=4)))
    with pytest.raises(CheckpointMismatchError, match=r'\(the checkpoint was written by an xmr '
                       r'too old to record its version, or another tool; read by xmr '):
        init_retriever(shallower, checkpoint)


def test_missing_checkpoint_is_named_before_the_model_is_built(trained, tmp_path, monkeypatch):
    """It was met once the backbone and the branch were built, in its own wording."""
    config, _, _ = trained

    def built(*args, **kwargs):
        raise AssertionError('the model was built')

    monkeypatch.setattr(MODELS, 'build', built)
    for given, problem in ((tmp_path / 'nothing.pth', 'no such file'),
                           (tmp_path, 'is a folder, not a file')):
        with pytest.raises(UserError, match=f'^{given} \\(checkpoint\\): {problem}: give a '
                           '.pth written by tools/train.py'):
            init_retriever(config, given)


def test_a_checkpoint_is_read_whole_once(trained, monkeypatch):
    """Checked before the build and again as it loaded, a multi-GB checkpoint was read whole
    twice for its records' CRC (found in review)."""
    from xmr.engine import checkpoint as checkpoints
    config, checkpoint, _ = trained
    reads = []
    check = checkpoints.check_archive_records
    monkeypatch.setattr(checkpoints, 'check_archive_records',
                        lambda path, *args: reads.append(path) or check(path, *args))
    init_retriever(config, checkpoint)
    assert reads == [checkpoint]


def test_checkpoint_with_pickled_objects_gets_advice(trained, tmp_path):
    config, checkpoint, _ = trained
    state = torch.load(checkpoint, map_location='cpu', weights_only=True)
    state['message_hub'] = {'log_scalars': {'train/loss': HistoryBuffer()}}
    torch.save(state, tmp_path / 'old.pth')
    with pytest.raises(ValueError, match=r'old\.pth: checkpoint pickles objects that torch\.load\('
                       r'weights_only=True\) refuses \(.*mmengine\.logging\.history_buffer'
                       r'\.HistoryBuffer\).*keep only its weights once'):
        init_retriever(config, tmp_path / 'old.pth')


def test_untrained_language_lists_the_trained_ones(trained):
    _, _, model = trained
    with pytest.raises(ValueError, match=r"has no adapters for \['ko'\]; it reads "
                       r"\['en', 'de', 'zh'\]"):
        encode_texts(model, ['개 한 마리'], 'ko')


def test_text_embeddings_match_the_evaluation_path(trained):
    _, _, model = trained
    captions = {'de': [['ein roter Kreis', 'zwei blaue Quadrate links'], ['drei Dreiecke']],
                'en': [['a red circle'], ['three green triangles at the top', 'a square']]}
    batch = model.data_preprocessor({
        'media': torch.zeros(2, 3, 32, 32, dtype=torch.uint8), 'media_id': ['a', 'b'],
        'captions': [{lang: captions[lang][row] for lang in captions} for row in range(2)]})
    predicted = model.predict(**batch)
    for lang, per_item in captions.items():
        texts = [text for item in per_item for text in item]
        expected = torch.cat([out['caption_embeddings'][lang] for out in predicted])
        # batch_size=1: no padding at all, so this also checks that padding changes nothing.
        for batch_size in (len(texts), 1):
            embeddings = encode_texts(model, texts, lang, batch_size=batch_size)
            assert embeddings.shape == (len(texts), 32)
            torch.testing.assert_close(embeddings, expected, atol=1e-5, rtol=1e-5)
    assert torch.allclose(encode_texts(model, 'a red circle', 'en').norm(dim=1), torch.ones(1))


def test_a_language_is_read_in_any_spelling_of_its_code(trained):
    _, _, model = trained
    expected = encode_texts(model, ['ein roter Kreis'], 'de')
    for spelling in ('DE', 'deu', 'deu_Latn'):
        torch.testing.assert_close(encode_texts(model, ['ein roter Kreis'], spelling), expected,
                                   rtol=0, atol=0, msg=spelling)


def test_media_embeddings_match_the_evaluation_path(trained, shared_data, tmp_path):
    _, _, model = trained
    video = shared_data / 'videos' / 'video_0.mov'
    if not video.is_file():
        pytest.skip(f'video fixture not found: {video}')
    rng = np.random.default_rng(0)
    paths = []
    for i, (height, width) in enumerate([(40, 48), (64, 30)]):
        paths.append(tmp_path / f'image{i}.png')
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(paths[i])
    for media_type, files in (('image', paths), ('video', [video])):
        ann = Annotation(dataset='mine', split='test', media_type=media_type, languages=['en'],
                         items=[MediaRecord(f'm{i}', str(path), {'en': ['a caption']})
                                for i, path in enumerate(files)])
        dump_annotation(ann, tmp_path / f'{media_type}.json')
        dataset = DATASETS.build(dict(type='RetrievalDataset', num_frames=3, transform=TINY,
                                      ann_file=str(tmp_path / f'{media_type}.json')))
        batch = next(iter(DataLoader(dataset, batch_size=4, collate_fn=retrieval_collate)))
        predicted = model.predict(**model.data_preprocessor(batch))
        expected = torch.stack([out['media_embedding'] for out in predicted])
        embeddings = encode_media(model, files, num_frames=3, batch_size=1)
        torch.testing.assert_close(embeddings, expected, atol=1e-5, rtol=1e-5)


def test_media_tensors_and_bad_media(trained):
    _, _, model = trained
    image = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
    frames = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    mixed = encode_media(model, [image, frames, image])
    assert mixed.shape == (3, 32)
    torch.testing.assert_close(mixed[0], mixed[2])
    torch.testing.assert_close(mixed[1], encode_media(model, [frames])[0])
    with pytest.raises(ValueError, match=r'media\[1\]: a tensor must be uint8'):
        encode_media(model, [image, image.float()])
    channels_last = image.permute(1, 2, 0)  # PIL's and numpy's layout, [H, W, 3]
    with pytest.raises(ValueError, match=re.escape(
            'media[0]: a tensor must be uint8 [3, H, W] or [T, 3, H, W], got torch.uint8 '
            '(32, 32, 3)')):
        encode_media(model, [channels_last])


def test_a_checkpoint_holding_only_the_model_s_facts_holds_none_of_its_weights(trained,
                                                                              tmp_path):
    """The retriever's facts (``_extra_state``: backbone, languages) are no weights: a file of
    them alone is another model's, not one missing every parameter."""
    config, _, reference = trained
    facts = {'_extra_state': reference.state_dict()['_extra_state']}
    torch.save({'state_dict': facts}, tmp_path / 'facts.pth')
    with pytest.raises(CheckpointMismatchError, match=r"facts.pth holds none of the model's "
                                                      r'weights \(its keys: _extra_state;'):
        init_retriever(config, tmp_path / 'facts.pth')


def test_media_are_decoded_one_batch_at_a_time(trained, monkeypatch):
    """A gallery is never decoded whole: the first batch is embedded after its own media were
    decoded, and the streamed batches give the embeddings of one-by-one encoding."""
    import xmr.apis.inference as inference

    _, _, model = trained
    generator = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=generator)
              for _ in range(7)]
    frames = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8, generator=generator)
    media = [images[0], frames, *images[1:], frames]
    decoded, at_first_batch = [], []
    decode, encode = inference._decode, model.encode_media
    monkeypatch.setattr(inference, '_decode', lambda *args: decoded.append(1) or decode(*args))
    monkeypatch.setattr(model, 'encode_media',
                        lambda batch: at_first_batch.append(len(decoded)) or encode(batch))
    embeddings = encode_media(model, media, batch_size=2)
    assert at_first_batch[0] == 3  # images 0 and 1, and the video between them
    monkeypatch.setattr(model, 'encode_media', encode)
    single = torch.cat([encode_media(model, [item], batch_size=1) for item in media])
    torch.testing.assert_close(embeddings, single, atol=1e-6, rtol=1e-5)


def test_a_checkpoint_holding_none_of_the_models_weights_is_named_with_its_keys(
        trained, tmp_path, capsys):
    """Strict loading printed, then raised, every key of both as missing or unexpected
    (printed, or logged as MMEngine's loaders report them, through its current logger)."""
    config, checkpoint, reference = trained
    torch.save({'model': reference.state_dict()}, tmp_path / 'foreign.pth')
    logged = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        with pytest.raises(CheckpointMismatchError, match=(
                r"^checkpoint .*foreign.pth holds none of the model's weights \(its keys: model; "
                r"the model's: [^_].*\): give a checkpoint tools/train.py wrote for this config's "
                'model')):
            init_retriever(config, tmp_path / 'foreign.pth')
    finally:
        logger.removeHandler(handler)
    assert not any('missing keys' in message for message in logged)
    assert 'missing keys' not in capsys.readouterr().out


def test_an_open_clip_training_checkpoint_is_sent_to_the_backbone_which_loads_it(trained,
                                                                                 tmp_path):
    """open_clip's own fine-tuned CLIP, epoch_N.pt as its training script writes it (epoch,
    name, the DDP-prefixed state dict, optimizer, scaler), given where a trained xmr model
    goes: the refusal names model.backbone.pretrained, which loads it as open_clip's
    load_checkpoint does."""
    import open_clip

    config, _, reference = trained
    torch.manual_seed(3)
    clip = open_clip.CLIP(**TINY_CLIP)
    optimizer = torch.optim.AdamW(clip.parameters())
    clip.encode_text(torch.randint(0, 100, (2, 32))).sum().backward()
    optimizer.step()
    path = tmp_path / 'epoch_3.pt'
    torch.save({'epoch': 3, 'name': 'ft', 'optimizer': optimizer.state_dict(),
                'scaler': torch.amp.GradScaler('cpu').state_dict(),
                'state_dict': {f'module.{k}': v for k, v in clip.state_dict().items()}}, path)
    with pytest.raises(CheckpointMismatchError, match=(
            rf"^checkpoint {re.escape(str(path))} holds none of the model's weights .*: it holds "
            r"the weights of the model's backbone.clip alone .*model.backbone.pretrained="
            rf"{re.escape(str(path))} with model.backbone.pretrained_cfg")):
        init_retriever(config, path)

    model = init_retriever(config, cfg_options={'model.backbone.pretrained': str(path)})
    expected = open_clip.CLIP(**TINY_CLIP)
    open_clip.load_checkpoint(expected, str(path))
    for key, value in expected.state_dict().items():
        assert torch.equal(model.backbone.clip.state_dict()[key], value), key


@pytest.mark.parametrize('meta', [dict(method='dasd'),
                                  dict(method='clip', converted_from='open_clip.bin')],
                         ids=['trained_here', 'converted_from_another_method'])
def test_only_a_file_converted_from_the_authors_is_held_to_their_settings(trained, tmp_path,
                                                                          meta):
    """The tiny model computes otherwise than DASD's code; a file that is not a conversion of
    the MLA / DASD authors' loads into it whatever its meta names."""
    config, checkpoint, reference = trained
    state = torch.load(checkpoint, map_location='cpu', weights_only=True)['state_dict']
    torch.save({'meta': meta, 'state_dict': state}, tmp_path / 'labelled.pth')
    assert init_retriever(config, tmp_path / 'labelled.pth') is not None


def test_a_checkpoint_of_a_ddp_wrapped_model_loads_without_the_module_prefix(trained, tmp_path):
    config, checkpoint, reference = trained
    state = torch.load(checkpoint, map_location='cpu', weights_only=True)['state_dict']
    torch.save({'state_dict': {f'module.{key}': value for key, value in state.items()}},
               tmp_path / 'ddp.pth')
    model = init_retriever(config, tmp_path / 'ddp.pth')
    torch.testing.assert_close(encode_texts(model, ['ein roter Kreis'], 'de'),
                               encode_texts(reference, ['ein roter Kreis'], 'de'))


def test_blank_texts_and_counts_below_one_are_refused_by_name(trained):
    _, _, model = trained
    with pytest.raises(ValueError, match=r'^texts \[1\] are empty or not strings'):
        encode_texts(model, ['ein Kreis', ' \t'], 'de')
    with pytest.raises(ValueError, match='^batch_size must be a positive int, got 0$'):
        encode_texts(model, ['ein Kreis'], 'de', batch_size=0)
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match='^num_frames must be a positive int, got 0$'):
        encode_media(model, [image], num_frames=0)


@pytest.mark.parametrize('batch_size', [2.5, 4.0, True])
def test_a_batch_size_that_is_no_int_is_refused_by_name(trained, batch_size):
    """A batch of 2.5 media was never full: encode_media decoded the whole gallery (videos of
    12 frames each) into one batch; encode_texts stopped in range() naming nothing."""
    _, _, model = trained
    images = [torch.zeros(3, 32, 32, dtype=torch.uint8)] * 3
    message = f'^batch_size must be a positive int, got {batch_size}$'
    with pytest.raises(ValueError, match=message):
        encode_media(model, images, batch_size=batch_size)
    with pytest.raises(ValueError, match=message):
        encode_texts(model, ['ein Kreis'], 'de', batch_size=batch_size)


def test_a_video_file_is_sampled_at_its_segment_centres_whatever_its_suffix_case(
        trained, shared_data, tmp_path):
    """310 frames in 2 segments of 155: the centres are frames 77 and 232, every time."""
    import decord

    _, _, model = trained
    video = shared_data / 'videos' / 'flipping_a_pancake.mkv'
    if not video.is_file():
        pytest.skip(f'video fixture not found: {video}')
    shouting = tmp_path / 'PANCAKE.MKV'
    shouting.write_bytes(video.read_bytes())
    frames = torch.from_numpy(decord.VideoReader(str(video)).get_batch([77, 232]).asnumpy())
    expected = encode_media(model, [frames.permute(0, 3, 1, 2).contiguous()])
    torch.manual_seed(0)
    torch.testing.assert_close(encode_media(model, [video, shouting], num_frames=2),
                               expected.expand(2, -1))


@pytest.mark.parametrize('suffix', ['.3gp', '.ts', '.wmv', '.ogv'])
def test_a_video_in_another_container_s_name_is_read_as_a_video(trained, shared_data,
                                                                 tmp_path, suffix):
    """A phone's .3gp clip (the MP4 family the container check reads) and the other containers
    FFmpeg reads were decoded as images ('not a decodable image'); FFmpeg tells the container
    from the bytes, so an MP4 under each name stands for a clip of it."""
    _, _, model = trained
    video = shared_data / 'videos' / 'bigbuckbunny.mp4'
    if not video.is_file():
        pytest.skip(f'video fixture not found: {video}')
    renamed = tmp_path / f'clip{suffix}'
    renamed.symlink_to(video)
    torch.testing.assert_close(encode_media(model, renamed, num_frames=2),
                               encode_media(model, video, num_frames=2), rtol=0, atol=0)


def test_one_media_file_given_alone_is_one_media(trained, tmp_path):
    """A lone path was iterated: a str as its characters ('a: file not found'), a Path not at
    all (TypeError: 'PosixPath' object is not iterable)."""
    _, _, model = trained
    path = tmp_path / 'scene.png'
    Image.fromarray(np.full((40, 30, 3), 200, dtype=np.uint8)).save(path)
    expected = encode_media(model, [path], transform=TINY)
    for alone in (path, str(path)):
        torch.testing.assert_close(encode_media(model, alone, transform=TINY), expected,
                                   rtol=0, atol=0)


def test_an_unreadable_file_is_named_by_its_position_with_advice_for_the_caller(trained,
                                                                                tmp_path):
    """The error advised "set on_corrupt='skip' on the dataset", an option encode_media lacks."""
    _, _, model = trained
    good, broken = tmp_path / 'good.png', tmp_path / 'broken.png'
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(good)
    broken.write_bytes(b'not an image')
    with pytest.raises(MediaReadError, match=r'broken\.png: not a decodable image .*media\[1\]'
                       r'.*: replace the file, or leave it out of the media$'):
        encode_media(model, [good, broken], transform=TINY)


def test_a_transform_of_another_size_than_the_tower_s_is_refused_by_name(trained):
    """It failed inside the image tower: 'The size of tensor a (37) must match the size of
    tensor b (17) at non-singleton dimension 1'."""
    _, _, model = trained
    image = torch.zeros(3, 50, 60, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r'^encode_media transform: it gives 48x48 media, but the '
                       r'image tower of OpenCLIPBackbone takes 32x32: .*transform=None'):
        encode_media(model, [image], transform=dict(type='MediaTransform', backbone=None,
                                                    size=48))


def test_options_leave_the_callers_config_as_it_was(trained):
    """The options were merged into the Config given, so a later call with the same Config and
    no options built the earlier call's model."""
    config, _, _ = trained
    cfg = Config.fromfile(config)
    model = init_retriever(cfg, cfg_options={'model.language_branch.languages': ['fr']})
    assert trained_languages(model) == ['en', 'fr']
    assert cfg.model.language_branch.languages == ['de', 'zh']
    assert trained_languages(init_retriever(cfg)) == ['en', 'de', 'zh']


def test_check_languages_takes_one_code_alone_and_any_spelling(trained):
    """'de' alone was checked as ['d', 'e'] and 'DE' was refused, which encode_texts reads."""
    _, _, model = trained
    check_languages(model, 'de')
    check_languages(model, ['DE', 'zho_Hans', 'eng'])
    with pytest.raises(ValueError, match=r"^captions: the model has no adapters for \['fr'\]"):
        check_languages(model, 'FR', 'captions')


def _assert_checked_as_the_model(model, config: Config, keys: str) -> None:
    """``check_config_languages`` refuses each language the built model refuses, with the
    model's message and the config's ``keys`` after it, and passes the others."""
    for lang in ('ko', 'FR', *trained_languages(model)):
        try:
            check_languages(model, lang, '--lang')
        except ValueError as error:
            with pytest.raises(ValueError, match=re.escape(f"{error} (the config's {keys}")):
                check_config_languages(config, lang, '--lang')
        else:
            check_config_languages(config, lang, '--lang')


@pytest.mark.parametrize('model_cfg, reads', [
    (tiny_retriever_cfg(), ['en', 'de', 'zh']),
    (tiny_retriever_cfg(language_branch=None), ['en']),
    (tiny_retriever_cfg(source_language='deu', language_branch=tiny_branch_cfg(['eng', 'ja'])),
     ['de', 'en', 'ja'])])
def test_the_config_s_languages_are_checked_as_the_built_model_checks_them(model_cfg, reads):
    """Refused from the config, by the message the built model gives, before its build."""
    config = Config(dict(model=model_cfg))
    model = MODELS.build(model_cfg)
    assert trained_languages(model) == reads
    _assert_checked_as_the_model(model, config, 'source_language and model.language_branch.')
    with pytest.raises(ValueError, match="--lang: unknown language code 'xq'"):
        check_config_languages(config, ['de', 'xq'], '--lang')
    # With modules: the built model's targets pass, its source language is refused.
    for lang in model.languages:
        check_config_languages(config, lang, '--langs', with_modules=True)
    with pytest.raises(ValueError, match=re.escape(
            f"--langs: '{model.source_language}' is the model's source language, read by its "
            'frozen tower with no module of its own; give one of its target languages '
            f"{model.languages} (the config's source_language and")):
        check_config_languages(config, [*model.languages, model.source_language], '--langs',
                               with_modules=True)


def test_the_config_s_languages_are_read_from_a_file_as_init_retriever_reads_it(tmp_path):
    """docs/evaluation.md gives `check_config_languages(config, ...)` the config
    `init_retriever` takes: a file or a shipped `xmr::` config too, not only a `Config` (a path
    stopped with "'str' object has no attribute 'get'")."""
    demo = 'xmr::demo/static_tiny-clip_synthetic.py'
    (tmp_path / 'mine.py').write_text(f"_base_ = ['{demo}']\n"
                                      "model = dict(language_branch=dict(languages=['de']))\n")
    for config in (demo, tmp_path / 'mine.py', str(tmp_path / 'mine.py')):
        check_config_languages(config, ['DE', 'en'])
    with pytest.raises(ValueError, match=r"^query: the model has no adapters for \['fr'\]; it "
                                         r"reads \['en', 'de'\] \(the config's source_language"):
        check_config_languages(tmp_path / 'mine.py', 'fr')
    with pytest.raises(UserError, match=r'no_such\.py \(config\): no such file'):
        check_config_languages(tmp_path / 'no_such.py', 'de')


def test_a_config_the_language_check_cannot_read_is_left_to_the_model():
    for model_cfg in (tiny_retriever_cfg(language_branch=dict(type='TargetLanguageBranch')),
                      None):
        check_config_languages(Config(dict(model=model_cfg)), 'ko')


@pytest.mark.parametrize('model_cfg, reads', [
    (dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg(), languages=['eng', 'de']),
     ['en', 'de']),
    (dict(type='DualEncoderRetriever', backbone=tiny_backbone_cfg()), ['en'])])
def test_a_dual_encoder_s_config_languages_are_checked_as_the_built_model_checks_them(
        monkeypatch, model_cfg, reads):
    """A dual encoder's languages were left to the built model: a query of a language its
    config does not list was refused once the weights had loaded."""
    model = MODELS.build(model_cfg)
    assert trained_languages(model) == reads
    monkeypatch.setattr(MODELS, 'build', lambda *args, **kwargs: pytest.fail('built'))
    config = Config(dict(model=model_cfg))
    _assert_checked_as_the_model(model, config, 'model.languages)')
    with pytest.raises(ValueError, match=re.escape(
            "--lang: the model does not read ['ko']; it reads ['en'")):
        check_config_languages(config, ['en', 'ko'], '--lang')


def test_a_model_the_apis_do_not_serve_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """A config whose model is no retriever (a backbone alone) has no predict to embed with;
    it is refused before its weights and its checkpoint load."""
    config = Config(dict(model=tiny_backbone_cfg()))
    monkeypatch.setattr(MODELS, 'build', lambda *args, **kwargs: pytest.fail('built'))
    with pytest.raises(TypeError, match=r'its model is a OpenCLIPBackbone, which is no '
                       r'retriever; xmr.apis serves the models whose class derives from '
                       r'BaseRetriever'):
        init_retriever(config, tmp_path / 'missing.pth')


def test_a_language_module_file_given_as_the_checkpoint_is_told_to_be_merged(trained, tmp_path):
    """It was refused as a file holding none of the model's weights, to be replaced by one
    tools/train.py wrote: the module, the right file for merge, was not named as one."""
    from xmr.models.language.language_modules import save_language_module

    config, checkpoint, reference = trained
    save_language_module(reference, 'de', tmp_path / 'de.pth', base_checkpoint=checkpoint)
    with pytest.raises(CheckpointMismatchError, match=(
            r"^checkpoint .*de\.pth is the language module of 'de' alone, not a model's "
            r'checkpoint: merge it into one first \(tools/language_modules\.py merge CONFIG '
            r'--base .*tiny\.pth --modules de=.*de\.pth --out merged\.pth\)$')):
        init_retriever(config, tmp_path / 'de.pth')


def test_a_custom_import_that_fails_is_named_with_its_cause(trained, tmp_path, monkeypatch):
    """MMEngine's loader said only 'Failed to import custom modules' and to set PYTHONPATH,
    with the folder on it and the misspelt name at the end of the error's chain."""
    (tmp_path / 'my_adapters.py').write_text('from xmr.models.adapters import BaseAdaptor\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = Config.fromfile(trained[0])
    cfg.custom_imports = dict(imports=['my_adapters'], allow_failed_imports=False)
    cfg.dump(tmp_path / 'mine.py')
    with pytest.raises(UserError) as refused:
        init_retriever(tmp_path / 'mine.py')
    assert str(refused.value).startswith(
        f"{tmp_path / 'mine.py'}: custom_imports: my_adapters failed to import: ImportError: "
        "cannot import name 'BaseAdaptor' from 'xmr.models.adapters'")


def test_a_config_xmr_ships_is_named_with_the_xmr_scheme():
    model = init_retriever('xmr::demo/static_tiny-clip_synthetic.py', cfg_options={
        'model.language_branch.tokenizer.corpus.num_scenes': 20,
        'model.language_branch.tokenizer.vocab_size': 200})
    assert trained_languages(model) == ['en', 'de', 'fr', 'zh', 'ja']


#: ``(open_clip architecture, pretrained tag)`` of every family xmr ships a config for (CLIP,
#: M-CLIP's ViT-L/14, SigLIP 2, the XLM-R and NLLB CLIPs), MetaCLIP 2's two resize modes, and
#: the bilinear records of docs/backbones.md's other families (CLIPA squashes, MobileCLIP
#: crops with mean 0 / std 1).
OPEN_CLIP_FAMILIES = [('ViT-B-32', 'openai'), ('ViT-L-14', 'openai'),
                      ('ViT-B-16-SigLIP2-256', 'webli'), ('ViT-SO400M-16-SigLIP2-256', 'webli'),
                      ('xlm-roberta-base-ViT-B-32', 'laion5b_s13b_b90k'), ('nllb-clip-base', 'v1'),
                      ('ViT-H-14-worldwide', 'metaclip2_worldwide'),
                      ('ViT-H-14-worldwide-378', 'metaclip2_worldwide'),
                      ('ViT-L-14-CLIPA', 'datacomp1b'), ('MobileCLIP-S1', 'datacompdr')]


def _open_clip_preprocess(arch: str, tag: str):
    """open_clip's evaluation transform for ``arch``'s ``tag``, as ``create_model_and_transforms``
    builds it: the default ``PreprocessCfg`` merged with the tag's record, at the tower's size."""
    import dataclasses

    import open_clip
    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict

    cfg = merge_preprocess_dict(dataclasses.asdict(PreprocessCfg()),
                                open_clip.get_pretrained_cfg(arch, tag))
    cfg['size'] = open_clip.get_model_config(arch)['vision_cfg']['image_size']
    return image_transform_v2(PreprocessCfg(**cfg), is_train=False), cfg


def _grey_levels(ours: torch.Tensor, reference: torch.Tensor, std) -> float:
    """The largest difference of two normalised images, in uint8 grey levels."""
    scale = 255 * torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
    return ((ours - reference) * scale).abs().max().item()


@pytest.mark.parametrize('arch, tag', OPEN_CLIP_FAMILIES, ids=[a for a, _ in OPEN_CLIP_FAMILIES])
def test_the_default_transform_is_open_clip_s_preprocessing_of_the_weights(
        arch, tag, shared_data, tmp_path, monkeypatch):
    """A tower whose weights' record says ``squash`` (SigLIP 2, MetaCLIP 2 at 378 px) got a
    short-side resize and centre crop by default: the pixels the model saw differed from
    open_clip's ``create_model_and_transforms`` by up to the whole image's range. Images and
    video frames now reach it as open_clip preprocesses them (tensor and PIL bicubic resampling
    differ by a couple of grey levels)."""
    from xmr.datasets.media_io import read_video_frames

    video = shared_data / 'videos' / 'flipping_a_pancake.mkv'
    if not video.is_file():
        pytest.skip(f'video fixture not found: {video}')
    preprocess, cfg = _open_clip_preprocess(arch, tag)
    size = cfg['size']
    # A tiny tower at the family's input size, with its weights' record as a local file names it.
    vision = dict(TINY_CLIP['vision_cfg'], image_size=size, patch_size=14 if size % 32 else 32)
    record = {key: cfg[key] for key in ('mean', 'std', 'interpolation', 'resize_mode')}
    model = MODELS.build(tiny_retriever_cfg(backbone=dict(
        type='OpenCLIPBackbone', arch=None, model_cfg=dict(TINY_CLIP, vision_cfg=vision),
        pretrained_cfg=record))).eval()
    seen = []
    encode = model.encode_media
    monkeypatch.setattr(model, 'encode_media', lambda media: seen.append(media) or encode(media))
    y, x = np.mgrid[0:300, 0:500]
    pixels = np.stack([x * 255 // 500, y * 255 // 300, (3 * x + y) % 256], -1).astype(np.uint8)
    Image.fromarray(pixels).save(tmp_path / 'wide.png')
    encode_media(model, [tmp_path / 'wide.png', video], num_frames=2)
    image_reference = preprocess(Image.open(tmp_path / 'wide.png'))
    assert _grey_levels(seen[0][0], image_reference, cfg['std']) <= 3
    frames = read_video_frames(video, 2, random_offset=False)[0]
    for frame, ours in zip(frames, seen[1][0]):
        reference = preprocess(Image.fromarray(frame.permute(1, 2, 0).numpy()))
        assert _grey_levels(ours, reference, cfg['std']) <= 3


@pytest.mark.parametrize('options, error, message', [
    ({'model.disentangler.features': ['sa']}, ValueError,
     r"^L_sc supervises f\^sr, which features=\('sa',\) leaves out"),
    ({'model.disentangler.generator.dz': 16}, UnknownOptionError,
     r"^model\.disentangler\.generator\.dz: disentangler ParameterGenerator: unknown option")])
def test_a_model_its_config_alone_refuses_is_refused_before_anything_is_built(
        monkeypatch, options, error, message):
    """init_retriever met these once the backbone and the branch's tokenizer were built (24 s
    into the demo's DASD config), where the tools refuse them as the config loads."""
    def build(*args, **kwargs):
        raise AssertionError('the model was built')

    monkeypatch.setattr(MODELS, 'build', build)
    with pytest.raises(error, match=message):
        init_retriever('xmr::demo/dasd_tiny-clip_synthetic.py', cfg_options=options)


def test_a_wrapped_model_loads_its_checkpoint_as_the_docstring_says(trained):
    """The keys were compared with the wrapper's 'module.'-prefixed ones and refused."""
    _, checkpoint, reference = trained
    torch.manual_seed(1)
    wrapped = torch.nn.DataParallel(MODELS.build(tiny_retriever_cfg()))
    load_trained_checkpoint(wrapped, checkpoint)
    for key, value in reference.state_dict().items():
        assert torch.equal(wrapped.module.state_dict()[key], value), key


def test_a_refused_checkpoint_leaves_every_weight_as_it_was(trained, tmp_path):
    """A strict load that failed on one missing key had copied every other weight in."""
    _, checkpoint, _ = trained
    state = torch.load(checkpoint, weights_only=True)['state_dict']
    dropped = next(key for key in state if key.startswith('language_branch.adapters'))
    torch.save({'state_dict': {k: v for k, v in state.items() if k != dropped}},
               tmp_path / 'short.pth')
    torch.manual_seed(1)
    model = MODELS.build(tiny_retriever_cfg())
    before = {key: value.clone() for key, value in model.state_dict().items()}
    with pytest.raises(CheckpointMismatchError, match=f'1 keys missing from the checkpoint: '
                                                      f'{re.escape(dropped)}'):
        load_trained_checkpoint(model, tmp_path / 'short.pth')
    assert all(torch.equal(model.state_dict()[key], value) for key, value in before.items())


def test_a_bf16_model_encodes_media_as_it_encodes_texts(trained):
    """uint8 media became fp32 and met the bf16 weights (an error naming their dtypes)."""
    _, _, reference = trained
    model = MODELS.build(tiny_retriever_cfg())
    model.load_state_dict(reference.state_dict())
    model = model.to(torch.bfloat16).eval()
    image = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0))
    embedding = encode_media(model, [image])
    assert embedding.dtype == torch.float32
    torch.testing.assert_close(embedding, encode_media(reference, [image]), atol=0.05, rtol=0)


def test_videos_of_other_frame_counts_encode_together_as_each_alone(trained):
    """Batched by dimension alone, 8 and 12 frames met in one batch and were refused."""
    _, _, model = trained
    generator = torch.Generator().manual_seed(0)
    videos = [torch.randint(0, 256, (frames, 3, 32, 32), dtype=torch.uint8, generator=generator)
              for frames in (8, 12, 8)]
    together = encode_media(model, videos)
    alone = torch.cat([encode_media(model, [video]) for video in videos])
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=1e-5)


def test_a_pil_image_or_a_folder_given_as_media_is_refused_by_name(trained, tmp_path):
    _, _, model = trained
    image = Image.new('RGB', (32, 32))
    with pytest.raises(TypeError, match=r'^media 1 is a Image: give a file path or a uint8 '
                                        r'tensor \[3, H, W\]'):
        encode_media(model, [torch.zeros(3, 32, 32, dtype=torch.uint8), image])
    with pytest.raises(TypeError, match='^media 0 is a Image'):
        encode_media(model, image)
    with pytest.raises(TypeError, match='^media 0 is a bytes: give a file path'):
        encode_media(model, os.fsencode(tmp_path / 'a.png'))  # not its byte values, one by one
    with pytest.raises(MediaReadError, match=f'^{re.escape(str(tmp_path))}: is a folder, not a '
                                             'file'):
        encode_media(model, [tmp_path])
    (tmp_path / 'clip.mp4').mkdir()
    with pytest.raises(MediaReadError, match='clip.mp4: is a folder, not a file'):
        encode_media(model, [tmp_path / 'clip.mp4'])


@pytest.mark.parametrize('routine, text_language', [('routine3', 'en'), ('translate_test', 'en'),
                                                    ('routine1', 'de')])
def test_a_model_querying_with_back_translations_reads_target_texts_as_source_text(
        monkeypatch, routine, text_language):
    """Its evaluation tokenises a target language's queries (their MT into English) as English
    text; encode_texts tokenised them as German, which a tokenizer writing the language (NLLB's
    language token) encodes otherwise."""
    model = MODELS.build(dict(type='TranslationAlignmentRetriever', routine=routine,
                              backbone=tiny_backbone_cfg(), language_branch=tiny_branch_cfg()))
    tokenizer = model.language_branch.tokenizer
    seen = []
    evaluation_batch = tokenizer.evaluation_batch
    monkeypatch.setattr(tokenizer, 'evaluation_batch', lambda texts, langs: (
        seen.extend(langs), evaluation_batch(texts, langs))[1])
    encode_texts(model.eval(), ['a red circle', 'two squares'], 'de')
    assert seen == [text_language] * 2


def test_a_model_left_in_training_mode_encodes_as_in_evaluation_and_keeps_its_modes():
    """A model straight from training (its runner leaves it in training mode, the frozen
    backbone in eval) encoded with LoRA's dropout on: the same texts gave other embeddings at
    every call. Each module's mode is given back after."""
    lora = tiny_retriever_cfg(language_branch=tiny_branch_cfg(
        adapters=dict(type='LoRA', r=2, dropout=0.5)))
    torch.manual_seed(0)
    model = MODELS.build(lora)
    with torch.no_grad():
        for parameter in model.language_branch.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    texts = ['ein roter Kreis', 'zwei blaue Quadrate links']
    expected = encode_texts(model.eval(), texts, 'de')
    model.train()
    model.backbone.eval()
    modes = {name: module.training for name, module in model.named_modules()}
    seen = []
    for module in model.modules():
        module.register_forward_pre_hook(lambda module, _: seen.append(module.training))
    for _ in range(2):
        torch.testing.assert_close(encode_texts(model, texts, 'de'), expected, rtol=0, atol=0)
    image = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
    torch.testing.assert_close(encode_media(model, [image]),
                               encode_media(model.eval(), [image]), rtol=0, atol=0)
    model.train()
    model.backbone.eval()
    encode_media(model, [image])
    assert {name: module.training for name, module in model.named_modules()} == modes
    assert seen and not any(seen)


def test_init_retriever_puts_the_model_on_the_device_it_is_given(trained):
    """``device`` is where every weight and buffer ends up (the meta device stands for an
    accelerator this host lacks)."""
    config, checkpoint, _ = trained
    model = init_retriever(config, checkpoint, device='meta')
    assert {tensor.device.type for tensor in itertools.chain(model.parameters(),
                                                             model.buffers())} == {'meta'}
    assert not model.training


def test_a_config_without_a_model_is_refused_by_name(tmp_path):
    Config(dict(work_dir='runs')).dump(tmp_path / 'nomodel.py')
    with pytest.raises(UserKeyError, match=r'config .*nomodel\.py has no model'):
        init_retriever(tmp_path / 'nomodel.py')


def test_only_the_ddp_prefix_is_stripped_not_module_inside_a_key(tmp_path):
    """``module.`` is DDP's prefix only at the start of a key: a model of one's own whose
    submodule is named ``text_module`` keeps ``text_module.weight`` as it is, whether the
    checkpoint was written by a wrapped model or not."""
    def build():
        model = torch.nn.Module()
        model.text_module = torch.nn.Linear(2, 2)
        return model

    torch.manual_seed(0)
    trained_model = build()
    state = trained_model.state_dict()
    assert list(state) == ['text_module.weight', 'text_module.bias']
    torch.save({'state_dict': state}, tmp_path / 'bare.pth')
    torch.save({'state_dict': {f'module.{key}': value for key, value in state.items()}},
               tmp_path / 'ddp.pth')
    for name in ('bare.pth', 'ddp.pth'):
        model = build()
        load_trained_checkpoint(model, tmp_path / name)
        for key, value in state.items():
            assert torch.equal(model.state_dict()[key], value), (name, key)


def test_a_checkpoint_holding_no_state_dict_is_named(trained, tmp_path):
    """A file of one tensor, or whose ``state_dict`` is a list, holds no weights by name: it is
    refused as such, naming the file, not met as an AttributeError on ``.items``."""
    _, _, model = trained
    torch.save(torch.zeros(2), tmp_path / 'tensor.pth')
    torch.save({'state_dict': [torch.zeros(2)]}, tmp_path / 'listed.pth')
    for name in ('tensor.pth', 'listed.pth'):
        with pytest.raises(CheckpointMismatchError,
                           match=f'^checkpoint {re.escape(str(tmp_path / name))} holds no '
                                 'state_dict$'):
            load_trained_checkpoint(model, tmp_path / name)


def test_load_trained_checkpoint_returns_the_checkpoint_s_meta(trained, tmp_path):
    """The meta a training run saved (its iteration, say) comes back; a bare state dict's is
    empty."""
    _, checkpoint, model = trained
    assert load_trained_checkpoint(copy.deepcopy(model), checkpoint) == {'iter': 7}
    torch.save(model.state_dict(), tmp_path / 'bare.pth')
    assert load_trained_checkpoint(copy.deepcopy(model), tmp_path / 'bare.pth') == {}


def test_no_texts_or_no_media_are_refused_by_name(trained):
    """An empty list embedded nothing: ``encode_texts`` returned ``None`` in place of an
    ``[N, E]`` tensor."""
    _, _, model = trained
    with pytest.raises(ValueError, match='^no texts to encode$'):
        encode_texts(model, [], 'de')
    with pytest.raises(ValueError, match='^no media to encode$'):
        encode_media(model, [])


@pytest.mark.parametrize('num_workers', [-1, 1.5, '2'])
def test_a_number_of_workers_below_zero_or_no_int_is_refused_by_name(trained, num_workers):
    _, _, model = trained
    with pytest.raises(ValueError, match=re.escape(
            f'num_workers must be an int >= 0, got {num_workers!r}')):
        encode_media(model, [torch.zeros(3, 32, 32, dtype=torch.uint8)], num_workers=num_workers)


def test_a_model_on_a_text_only_backbone_is_told_to_search_its_texts():
    """A backbone with no image tower embeds no media: refused by name before any file is
    read (the stand-in model holds nothing but such a backbone)."""
    class WordsOnly(torch.nn.Module):
        pass

    model = types.SimpleNamespace(backbone=WordsOnly())
    with pytest.raises(TypeError, match='^WordsOnly is a text-only backbone: the model embeds '
                                        'no media; search its texts with encode_texts$'):
        encode_media(model, ['never-read.jpg'])


def test_media_none_of_which_can_be_read_raise_naming_each_and_pickle_whole(trained, tmp_path):
    """Skipping unreadable files, an encoding that reads none returned no embeddings at all:
    it raises :class:`NoMediaReadError` holding each file's marker, which survives the pickling
    a worker process sends it back by."""
    _, _, model = trained
    files = [tmp_path / 'empty.png', tmp_path / 'missing.png']
    files[0].write_bytes(b'')
    with pytest.warns(MediaSkippedWarning), pytest.raises(NoMediaReadError) as raised:
        encode_readable_media(model, files, transform=TINY, on_corrupt='skip')
    error = raised.value
    assert [(marker.index, marker.media_path) for marker in error.skipped] == [
        (0, str(files[0])), (1, str(files[1]))]
    assert str(files[0]) in str(error) and 'none of the 2 media can be read' in str(error)
    copied = pickle.loads(pickle.dumps(error))
    assert type(copied) is NoMediaReadError and str(copied) == str(error)
    assert [marker.index for marker in copied.skipped] == [0, 1]


def test_media_and_text_embeddings_are_unit_rows(trained):
    """Cosine scores are dot products of the embeddings: each image's and video's row, and each
    text's, has L2 norm 1, as the docstrings promise (a media path that skipped the
    normalisation matched ``predict`` and was found by no other test)."""
    _, _, model = trained
    generator = torch.Generator().manual_seed(0)
    media = [torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=generator),
             torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8, generator=generator)]
    for embeddings in (encode_media(model, media), encode_texts(model, ['ein Kreis'], 'de')):
        assert embeddings.dtype == torch.float32 and embeddings.device.type == 'cpu'
        torch.testing.assert_close(embeddings.norm(dim=1), torch.ones(len(embeddings)))


def test_the_progress_bar_ends_at_every_media_read_and_skipped(trained, monkeypatch, tmp_path):
    """Four media two a batch, the second unreadable: the last one's batch is encoded after the
    loop over the decoded media, and the bar reached 4 of 4 only if it advanced after it too."""
    import xmr.apis.inference as inference

    bars = []

    class Recorded(inference.ProgressBar):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(inference, 'ProgressBar', Recorded)
    image = torch.zeros(3, 32, 32, dtype=torch.uint8)
    (tmp_path / 'empty.png').write_bytes(b'')
    with pytest.warns(MediaSkippedWarning):
        encode_readable_media(trained[2], [image, tmp_path / 'empty.png', image, image],
                              batch_size=2, progress=True)
    assert [(bar.task_num, bar.completed) for bar in bars] == [(4, 4)]
