"""A phase's learning-rate factor, its checks and the schedule record a checkpoint keeps."""
import math

import pytest

from xmr.engine.phases import Phase, check_phase_names, phase_lr_factor


def cross_lingual(**changes) -> dict:
    """A ``train_cfg.phases`` entry, with ``changes``."""
    return dict(dict(name='cross_lingual', lr=2e-4, iters=10, trainable=['language_branch'],
                     loss_weights=dict(cl=1.0)), **changes)


def test_the_warm_up_length_rounds_to_the_nearest_iteration():
    """35% of 10 iterations is 3.5, rounded to a warm-up of 4 (not truncated to 3); a half
    rounds up, where round() took it to the even number (2.5 to 2, 4.5 to 4)."""
    assert [phase_lr_factor(step, 10, 0.35, 'constant') for step in range(5)] == \
        [0.25, 0.5, 0.75, 1.0, 1.0]
    assert [phase_lr_factor(step, 10, 0.25, 'constant') for step in range(4)] == \
        pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    assert phase_lr_factor(0, 45, 0.1, 'constant') == pytest.approx(1 / 5)


def test_the_decay_ends_at_the_floor_and_scales_between_it_and_one():
    """Cosine and linear decay from 1 to ``min_ratio``: ``min + (1 - min) * decay``."""
    cosine_half = 0.5 * (1 + math.cos(math.pi * 3 / 7))  # step 5 of 10, warm-up 2
    assert phase_lr_factor(5, 10, 0.2, 'cosine', min_ratio=0.1) == pytest.approx(
        0.1 + 0.9 * cosine_half)
    assert phase_lr_factor(5, 10, 0.2, 'linear', min_ratio=0.4) == pytest.approx(
        0.4 + 0.6 * (1 - 3 / 7))
    assert phase_lr_factor(2, 10, 0.2, 'cosine', min_ratio=0.4) == pytest.approx(1.0)


def test_the_start_is_the_loop_s_to_fill_in_not_the_config_s():
    with pytest.raises(KeyError, match=r"unknown keys \['start'\]"):
        Phase.from_config(1, cross_lingual(start=5))


@pytest.mark.parametrize('entry', [5, 'cross_lingual', None])
def test_a_phase_that_is_no_dict_is_named_by_its_index(entry):
    """``--cfg-options train_cfg.phases.1=5``: a TypeError that named nothing."""
    with pytest.raises(ValueError, match=(
            rf"^train_cfg.phases.1={entry!r}: a phase is a dict \(dict\(name=..., lr=..., "
            r"trainable=\[...\], loss_weights=dict\(...\)\)\)$")):
        Phase.from_config(1, entry)


def test_a_floor_above_the_base_rate_is_refused():
    with pytest.raises(ValueError, match=r'min_lr_ratio=1.5 must be a number in \[0, 1\]'):
        Phase.from_config(1, cross_lingual(min_lr_ratio=1.5))


def test_the_schedule_record_holds_every_setting_of_the_schedule_and_ignores_order():
    """Resuming compares these records: each setting that shapes the run must be in it, and
    the order in which the config lists the trainable prefixes or the multipliers must not."""
    phase = Phase.from_config(1, cross_lingual(
        trainable=['language_branch', 'disentangler'], warmup_ratio=0.2, schedule='linear',
        min_lr_ratio=0.1, lr_mult={'language_branch.embedding': 2, 'disentangler': 0.5},
        loss_weights=dict(sc=0.1, cl=1)))
    phase.start = 4
    assert phase.schedule_record() == dict(
        name='cross_lingual', start=4, end=14, lr=2e-4, warmup_ratio=0.2, schedule='linear',
        min_lr_ratio=0.1, lr_mult={'disentangler': 0.5, 'language_branch.embedding': 2.0},
        trainable=['disentangler', 'language_branch'], loss_weights={'cl': 1.0, 'sc': 0.1})


@pytest.mark.parametrize('length', ['iters', 'epochs'])
def test_a_phase_of_zero_iterations_or_epochs_is_refused(length):
    with pytest.raises(ValueError, match=f'phase cross_lingual: {length} must be a positive '
                                         'integer, got 0'):
        Phase.from_config(1, cross_lingual(**{'iters': None, length: 0}))


def test_an_empty_start_from_best_metric_is_refused():
    with pytest.raises(ValueError, match=r"start_from_best='' must be a validation metric's "
                                         r"name \(e.g. 'mAR'\) or None"):
        Phase.from_config(1, cross_lingual(start_from_best=''))


def test_a_phase_too_short_to_decay_holds_the_full_rate_after_its_warm_up():
    """One step after the warm-up (or none at all) leaves no interval to decay over."""
    assert phase_lr_factor(0, 1, 0.1, 'cosine') == 1.0
    assert [phase_lr_factor(step, 10, 0.9, 'linear') for step in (8, 9)] == [1.0, 1.0]


def test_a_multiplier_keyed_by_other_than_a_group_name_is_refused():
    with pytest.raises(ValueError, match=r"lr_mult is keyed by 1; its keys name a loss or a "
                                         r"parameter group, as strings \(e.g. 'disentangler'\)"):
        Phase.from_config(1, cross_lingual(lr_mult={1: 0.5}))


@pytest.mark.parametrize('key', ['lr_mult', 'loss_weights'])
def test_a_dict_written_as_one_command_line_string_says_how_to_set_its_entries(key):
    """--cfg-options parses no dict: train_cfg.phases.0.lr_mult="{'backbone': 0.1}" arrives as
    a string, and the error says to set an entry at a time."""
    with pytest.raises(ValueError, match=rf"--cfg-options train_cfg\.phases\.N\.{key}\.NAME="):
        Phase.from_config(0, cross_lingual(**{key: "{'cl': 0.1}"}))


def test_two_phases_of_one_name_are_refused_naming_both():
    """The phase report, the best weights of start_from_best and the logs are by name: the
    third phase's results stood in the second's column, which vanished without a word."""
    def phase(name):
        return Phase(name=name, lr=1e-3, trainable=['language_branch'], loss_weights=dict(cl=1),
                     iters=4)

    check_phase_names([phase('source_finetune'), phase('cross_lingual'), phase('other')])
    with pytest.raises(ValueError, match=r"^train_cfg.phases.1 and train_cfg.phases.2 are both "
                                         r"named 'cross_lingual'"):
        check_phase_names([phase('source_finetune'), phase('cross_lingual'),
                           phase('cross_lingual')])
