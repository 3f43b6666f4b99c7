"""Multi-MSRVTT from the 1k-A CSV, per-language JSONs and training lists (tiny test files)."""
from __future__ import annotations

import json

import pytest

from xmr.datasets import load_annotation
from xmr.datasets.converters.errors import ConversionError
from xmr.datasets.converters.msrvtt import convert_msrvtt, main

TEST_IDS = ['video7010', 'video7020', 'video7030']


@pytest.fixture
def msrvtt(tmp_path):
    (tmp_path / 'test.csv').write_text(
        'key,vid_key,video_id,sentence\n' + ''.join(
            f'ret{i},msr{v[5:]},{v},a clip number {i}\n' for i, v in enumerate(TEST_IDS)))
    (tmp_path / 'de.json').write_text(json.dumps(
        [{'video_id': v, 'caption': f'Clip Nummer {i}'} for i, v in enumerate(TEST_IDS)]))
    (tmp_path / 'zh.json').write_text(json.dumps(
        {v: [f'片段{i}'] for i, v in enumerate(reversed(TEST_IDS))}, ensure_ascii=False),
        encoding='utf-8')
    sentences = [{'video_id': f'video{v}', 'sen_id': 100 * v + k, 'caption': f'v{v} s{k}'}
                 for v in range(6) for k in (2, 0, 1)]
    (tmp_path / 'data.json').write_text(json.dumps({'videos': [], 'sentences': sentences}))
    (tmp_path / '7k.csv').write_text('video_id\nvideo0\nvideo1\nvideo2\n')
    (tmp_path / '9k.csv').write_text('video_id\nvideo0\nvideo1\nvideo2\nvideo3\nvideo4\n')
    return tmp_path


def test_test_train_and_held_out_validation(msrvtt):
    outputs = convert_msrvtt(msrvtt / 'test.csv', {'de': msrvtt / 'de.json',
                                                  'zh': msrvtt / 'zh.json'},
                             msrvtt / 'data.json', {'7k': msrvtt / '7k.csv',
                                                    '9k': msrvtt / '9k.csv'})
    test = outputs['msrvtt_test1ka']
    assert test.media_type == 'video' and test.languages == ['en', 'de', 'zh']
    assert [r.media_id for r in test.items] == TEST_IDS
    assert test.items[0].media_path == 'video7010.mp4'
    assert test.items[2].captions == {'en': ['a clip number 2'], 'de': ['Clip Nummer 2'],
                                      'zh': ['片段0']}
    assert [r.media_id for r in outputs['msrvtt_train7k'].items] == ['video0', 'video1',
                                                                     'video2']
    assert [r.media_id for r in outputs['msrvtt_val'].items] == ['video3', 'video4']
    # Training captions follow sen_id, not file order.
    assert outputs['msrvtt_train9k'].items[4].captions['en'] == ['v4 s0', 'v4 s1', 'v4 s2']


def test_a_video_extension_with_its_dot_names_the_same_files(msrvtt):
    """``--video-ext .mp4`` wrote ``video7010..mp4``: with ``--text-only`` nothing caught it
    until training failed to open the first video."""
    for ext in ('.webm', 'webm'):
        test = convert_msrvtt(msrvtt / 'test.csv', video_ext=ext)['msrvtt_test1ka']
        assert test.items[0].media_path == 'video7010.webm'
    for ext in ('', '.', '..mp4', 'clips/mp4'):
        with pytest.raises(ConversionError, match=f'video extension {ext!r} names no file '
                                                  'extension.*e.g. mp4'):
            convert_msrvtt(msrvtt / 'test.csv', video_ext=ext)


def test_inputs_are_checked(msrvtt):
    (msrvtt / 'fr.json').write_text(json.dumps({TEST_IDS[0]: 'un', TEST_IDS[1]: 'deux'}))
    with pytest.raises(ConversionError, match=r'fr test JSON .*fr\.json has no caption for 1 of '
                                              r'the 3 test videos .*\(first: video7030\)'):
        convert_msrvtt(msrvtt / 'test.csv', {'fr': msrvtt / 'fr.json'})
    with pytest.raises(ConversionError, match='English test captions come from the test CSV'):
        convert_msrvtt(msrvtt / 'test.csv', {'en': msrvtt / 'de.json'})
    (msrvtt / 'leak.csv').write_text('video_id\nvideo1\nvideo7020\n')
    with pytest.raises(ConversionError, match='holds 1 1k-A test videos'):
        convert_msrvtt(msrvtt / 'test.csv', data_json=msrvtt / 'data.json',
                       train_lists={'9k': msrvtt / 'leak.csv'})
    (msrvtt / 'bad.csv').write_text('key,video,sentence\nret0,video1,hi\n')
    with pytest.raises(ConversionError, match=r"bad\.csv lacks the column\(s\) \['video_id'\]"):
        convert_msrvtt(msrvtt / 'bad.csv')


def test_missing_video_stops_the_command_line(msrvtt):
    videos = msrvtt / 'videos'
    videos.mkdir()
    for video_id in TEST_IDS[:2]:
        (videos / f'{video_id}.mp4').touch()
    with pytest.raises(SystemExit, match=f'video file not found: {videos / "video7030.mp4"}'):
        main(['--test-csv', str(msrvtt / 'test.csv'), '--videos-dir', str(videos),
              '--out-dir', str(msrvtt / 'out')])
    assert not (msrvtt / 'out').exists()


def test_text_only_writes_text_pairs_without_videos(msrvtt):
    """--text-only (text pairs for a text-only teacher or the cross-lingual phase), which every
    other converter takes, was refused as an unknown argument."""
    main(['--test-csv', str(msrvtt / 'test.csv'), '--test-json', f'de={msrvtt / "de.json"}',
          '--data-json', str(msrvtt / 'data.json'), '--train-list', f'7k={msrvtt / "7k.csv"}',
          '--text-only', '--out-dir', str(msrvtt / 'out'), '--skip-benchmark-size-check'])
    test = load_annotation(msrvtt / 'out' / 'msrvtt_test1ka.json')
    assert test.media_type == 'text' and [r.media_path for r in test.items] == [None] * 3
    assert test.items[2].captions == {'en': ['a clip number 2'], 'de': ['Clip Nummer 2']}
    train = load_annotation(msrvtt / 'out' / 'msrvtt_train7k.json')
    assert train.media_type == 'text'
    assert train.items[1].captions == {'en': ['v1 s0', 'v1 s1', 'v1 s2']}


def test_release_files_at_fault_are_named_with_the_line_or_sentence(msrvtt):
    """Each was refused naming the output file (repeats, no rows), by a bare int() message, or
    not at all (a null video_id became a video named 'None')."""
    data = json.loads((msrvtt / 'data.json').read_text())
    lists = {'7k': msrvtt / '7k.csv'}
    for key, value, shown in (('sen_id', 's5', "sen_id 's5', not an integer"),
                              ('video_id', None, "video_id None, not a video name")):
        data['sentences'][4][key] = value
        (msrvtt / 'bad.json').write_text(json.dumps(data))
        with pytest.raises(ConversionError, match=f'bad.json sentence 4 has {shown}'):
            convert_msrvtt(msrvtt / 'test.csv', data_json=msrvtt / 'bad.json', train_lists=lists)
        data['sentences'][4][key] = 'video1' if key == 'video_id' else 4
    (msrvtt / 'repeats.csv').write_text('video_id\nvideo0\nvideo1\nvideo0\n')
    with pytest.raises(ConversionError, match=r"7k training list .*repeats\.csv line 4 repeats "
                                              r"video 'video0' of line 2$"):
        convert_msrvtt(msrvtt / 'test.csv', data_json=msrvtt / 'data.json',
                       train_lists={'7k': msrvtt / 'repeats.csv'})
    (msrvtt / 'header.csv').write_text('key,vid_key,video_id,sentence\n')
    with pytest.raises(ConversionError, match=r'test CSV .*header\.csv holds its header and no '
                                              'row$'):
        convert_msrvtt(msrvtt / 'header.csv')


def test_a_data_file_without_training_lists_is_refused_not_ignored(msrvtt):
    with pytest.raises(ConversionError, match=r'the MSRVTT data file .*gone\.json gives the '
                                              'captions of training lists, and none is given'):
        convert_msrvtt(msrvtt / 'test.csv', data_json=msrvtt / 'gone.json')


def test_test_json_keyed_by_video_file_name(msrvtt):
    """MCLIP4VLA's Multi-MSRVTT release (``multilingual_test/test_{lang}.json``) keys each
    video's captions by its file name, ``video7010.mp4``: every 1k-A video was reported as
    having no caption in it."""
    (msrvtt / 'ru.json').write_text(json.dumps(
        {f'{v}.mp4': [f'клип {i}'] for i, v in enumerate(TEST_IDS)}, ensure_ascii=False),
        encoding='utf-8')
    (msrvtt / 'sw.json').write_text(json.dumps(
        [{'video_id': f'{v}.MP4', 'sentence': f'klipu {i}'} for i, v in enumerate(TEST_IDS)]))
    test = convert_msrvtt(msrvtt / 'test.csv', {'ru': msrvtt / 'ru.json',
                                                'sw': msrvtt / 'sw.json'})['msrvtt_test1ka']
    assert [r.captions for r in test.items] == [
        {'en': [f'a clip number {i}'], 'ru': [f'клип {i}'], 'sw': [f'klipu {i}']}
        for i in range(3)]
    # A key that is no video file name stays whole: 'video7010.x' names no video 'video7010'.
    (msrvtt / 'odd.json').write_text(json.dumps({f'{v}.x': 'y' for v in TEST_IDS}))
    with pytest.raises(ConversionError, match='has no caption for 3 of the 3 test videos'):
        convert_msrvtt(msrvtt / 'test.csv', {'ru': msrvtt / 'odd.json'})


def test_test_json_naming_a_video_twice_is_refused(msrvtt):
    """Its captions under both keys were merged into one list without a word."""
    captions = {v: 'a' for v in TEST_IDS} | {f'{TEST_IDS[1]}.mp4': 'b'}
    (msrvtt / 'vi.json').write_text(json.dumps(captions))
    with pytest.raises(ConversionError, match=r"vi test JSON .*vi\.json names video "
                                              r"'video7020' twice: as 'video7020' and as "
                                              r"'video7020\.mp4'"):
        convert_msrvtt(msrvtt / 'test.csv', {'vi': msrvtt / 'vi.json'})


def test_test_json_keeps_one_caption_a_video_as_the_1k_a_protocol(msrvtt):
    """The 1k-A test ranks one caption a video in every language (the CSV's English one;
    MCLIP4VLA reads ``captions[0]`` of its test JSONs): a JSON listing more put them all into
    the queries, another protocol than the English column's and the papers'."""
    (msrvtt / 'cs.json').write_text(json.dumps(
        {v: [f'klip {i}', f'jiný {i}', f'třetí {i}'][:i + 1] for i, v in enumerate(TEST_IDS)},
        ensure_ascii=False), encoding='utf-8')
    with pytest.warns(UserWarning, match=r'cs test JSON .*cs\.json: 3 captions of 2 of the 3 '
                                         r'test videos dropped; the 1k-A protocol ranks the '
                                         r'first of each \(first: video7020, 2 captions\)'):
        test = convert_msrvtt(msrvtt / 'test.csv', {'cs': msrvtt / 'cs.json'})['msrvtt_test1ka']
    assert [r.captions['cs'] for r in test.items] == [['klip 0'], ['klip 1'], ['klip 2']]
