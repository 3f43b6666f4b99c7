"""A config's text is formatted by yapf once per text and options, as yapf formats it."""
from __future__ import annotations

import mmengine.config.config as mmengine_config
from mmengine.config import Config
from yapf.yapflib.yapf_api import FormatCode

import xmr.engine  # noqa: F401 (installs FormatOnce)
from xmr.engine.config_text import FormatOnce, format_config_text_once


def test_a_config_s_text_is_yapf_s_and_formatted_once(monkeypatch):
    cfg = Config(dict(model=dict(type='CrossLingualRetriever', languages=['de', 'fr', 'cs']),
                      train_cfg=dict(type='PhasedTrainLoop', phases=[dict(name='cl', iters=9)])))
    calls = []

    def counted(source, **options):
        calls.append(source)
        return FormatCode(source, **options)

    monkeypatch.setattr(mmengine_config, 'FormatCode', FormatOnce(counted))
    unformatted = Config(cfg.to_dict(), format_python_code=False).pretty_text
    assert cfg.pretty_text == FormatCode(unformatted, style_config=dict(
        based_on_style='pep8', blank_line_before_nested_class_or_def=True,
        split_before_expression_after_opening_paren=True))[0]
    assert cfg.pretty_text == cfg.pretty_text and calls == [unformatted]
    cfg.train_cfg.phases[0].iters = 10
    assert 'iters=10' in cfg.pretty_text and len(calls) == 2


def test_results_are_kept_by_source_and_options():
    calls = []

    def format_code(source, **options):
        calls.append((source, options))
        return source.upper() + str(options.get('style', '')), True

    format_once = FormatOnce(format_code, size=3)
    assert format_once('a') == ('A', True)
    assert format_once('a', style=1) == ('A1', True)
    assert format_once('b') == ('B', True)
    assert [format_once('a'), format_once('a', style=1), format_once('b')] == [
        ('A', True), ('A1', True), ('B', True)]
    assert calls == [('a', {}), ('a', {'style': 1}), ('b', {})]


def test_mmengine_formats_through_one_format_once():
    installed = mmengine_config.FormatCode
    assert isinstance(installed, FormatOnce) and installed.format_code is FormatCode
    format_config_text_once()
    assert mmengine_config.FormatCode is installed
