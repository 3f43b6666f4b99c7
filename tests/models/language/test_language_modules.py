"""Per-language module files: exact round trip, several languages in one model, shares."""
import math
import re

import pytest
import torch

import xmr
from tests.conftest import CORPUS, tiny_backbone_cfg, tiny_branch_cfg, tiny_dasd_cfg
from tests.models.adapters.peft_helpers import CAPTIONS, clip_branch_cfg
from xmr.models.language.language_modules import (
    check_module_finite,
    language_parameter_report,
    language_state_dict,
    load_language_module,
    save_language_module,
    save_merged_checkpoint,
)
from xmr.registry import MODELS
from xmr.version import provenance

LORA = dict(type='LoRA', r=2, targets=['q', 'v'])
MIXED = [LORA, dict(type='CompacterAdapter', reduction_factor=4),
         dict(type='SoftPrompt', num_tokens=2)]


def build(languages, adapters=MIXED, module_seed=0, **kwargs):
    """A retriever on the same frozen tiny CLIP every time; its modules drawn from module_seed."""

    torch.manual_seed(0)
    model = MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                              language_branch=clip_branch_cfg(adapters, languages), **kwargs))
    torch.manual_seed(module_seed)
    with torch.no_grad():
        for parameter in model.language_branch.adapters.parameters():
            parameter.normal_(std=0.1)
    return model.eval()


def encode(model, lang):
    tokens = model.language_branch.tokenize(CAPTIONS)
    with torch.no_grad():
        return model.encode_text(tokens, lang)


def test_round_trip_is_exact_and_the_file_holds_only_the_module(tmp_path):
    source = build(['de'], module_seed=1)
    path = save_language_module(source, 'de', tmp_path / 'de.pth')
    payload = torch.load(path, weights_only=True)
    assert set(payload['state_dict']) == {
        f'adapters.{key}' for key in source.language_branch.adapters.sets['de'].state_dict()}
    assert payload['lang'] == 'de'
    assert {key: payload[key] for key in provenance()} == provenance()

    receiver = build(['de'], module_seed=2)
    assert not torch.allclose(encode(receiver, 'de'), encode(source, 'de'))
    assert load_language_module(receiver, path) == 'de'
    for key, value in language_state_dict(source, 'de').items():
        assert torch.equal(language_state_dict(receiver, 'de')[key], value), key
    assert torch.equal(encode(receiver, 'de'), encode(source, 'de'))


def test_modules_and_merged_models_holding_nan_are_refused_and_nothing_is_written(tmp_path):
    """A run that diverged before it saved: its NaN weights were exported, merged and written
    without a word, and surfaced as NaN scores at test time."""
    diverged = build(['de', 'fr'], module_seed=1)
    with torch.no_grad():
        next(diverged.language_branch.adapters.sets['de'].parameters()).view(-1)[0] = math.nan
    with pytest.raises(ValueError, match=r'^the de module holds NaN or infinite weights \(\S+\): '
                                         'its run diverged before this checkpoint was saved'):
        save_language_module(diverged, 'de', tmp_path / 'de.pth')
    assert not list(tmp_path.iterdir())
    check_module_finite(diverged, 'fr')  # its other language is finite

    # A file written by an xmr that did not check, or damaged: refused as it loads.
    finite = build(['de'], module_seed=1)
    path = save_language_module(finite, 'de', tmp_path / 'de.pth')
    payload = torch.load(path, weights_only=True)
    key = sorted(payload['state_dict'])[0]
    payload['state_dict'][key].view(-1)[0] = math.inf
    torch.save(payload, path)
    receiver = build(['de'], module_seed=2)
    before = language_state_dict(receiver, 'de')
    with pytest.raises(ValueError, match=re.escape(
            f'{path} (de): 1 weights hold NaN or infinite values ({key}): the run diverged')):
        load_language_module(receiver, path)
    assert all(torch.equal(language_state_dict(receiver, 'de')[k], v) for k, v in before.items())

    # A merge onto a base whose shared weights diverged writes nothing.
    with torch.no_grad():
        next(receiver.backbone.parameters()).view(-1)[0] = math.nan
    out = tmp_path / 'merged.pth'
    with pytest.raises(ValueError, match=re.escape(f'{out} not written: ') + r'\d weights hold '
                       r'NaN or infinite values \(backbone\..*kept from the base checkpoint '
                       'run/iter_9.pth'):
        save_merged_checkpoint(receiver, out, dict(base='run/iter_9.pth'))
    assert not out.exists()


def test_a_module_is_saved_and_loaded_by_any_spelling_of_its_language(tmp_path):
    """As encode_texts and the tool take ``deu_Latn`` for ``de``, so do the module functions;
    the file records the canonical code."""
    source = build(['de'], module_seed=1)
    path = save_language_module(source, 'deu_Latn', tmp_path / 'de.pth')
    assert torch.load(path, weights_only=True)['lang'] == 'de'
    receiver = build(['de'], module_seed=2)
    assert load_language_module(receiver, path, lang='DE') == 'de'
    assert torch.equal(encode(receiver, 'de'), encode(source, 'de'))


def test_two_languages_trained_apart_keep_their_own_outputs_in_one_model(tmp_path):
    german, french = build(['de'], module_seed=3), build(['fr'], module_seed=4)
    save_language_module(german, 'de', tmp_path / 'de.pth')
    save_language_module(french, 'fr', tmp_path / 'fr.pth')
    both = build(['de', 'fr'], module_seed=5)
    load_language_module(both, tmp_path / 'de.pth')
    load_language_module(both, tmp_path / 'fr.pth')
    torch.testing.assert_close(encode(both, 'de'), encode(german, 'de'), atol=0, rtol=0)
    torch.testing.assert_close(encode(both, 'fr'), encode(french, 'fr'), atol=0, rtol=0)
    # A module can also be loaded under another language's name.
    assert load_language_module(both, tmp_path / 'de.pth', lang='fr') == 'fr'
    torch.testing.assert_close(encode(both, 'fr'), encode(german, 'de'), atol=0, rtol=0)


def test_a_module_of_another_config_is_refused_with_the_difference(tmp_path):
    save_language_module(build(['de'], adapters=LORA), 'de', tmp_path / 'de.pth')
    with pytest.raises(ValueError, match=r"other shapes \['adapters.0:attn_qkv.lora_A.q'"):
        load_language_module(build(['de'], adapters=dict(LORA, r=1)), tmp_path / 'de.pth')
    with pytest.raises(ValueError, match=r"missing \['adapters.0:attn_out.lora_A.out'.* \(The "
                       rf'file was written by xmr {re.escape(xmr.__version__)} \('):
        load_language_module(build(['de'], adapters=dict(LORA, targets=['q', 'v', 'out'])),
                             tmp_path / 'de.pth')
    # Other adapter types: told as such, not as shared weights that differ (whose advice, the
    # base to build from, cannot fit either).
    with pytest.raises(ValueError, match=r"does not fit this model: adapters: file \['LoRA'\] vs "
                                         r"model \['CompacterAdapter', 'LoRA', 'SoftPrompt'\]"):
        load_language_module(build(['de']), tmp_path / 'de.pth')
    # A model without the file's language: the file, both languages and both routes named.
    with pytest.raises(KeyError, match=re.escape(
            f"{tmp_path / 'de.pth'} holds the 'de' module, and the model has no 'de' (its "
            "languages: ['fr']): load it into one of them (lang='fr'; tools/language_modules.py "
            "merge --modules fr=PATH), or add 'de' to model.language_branch.languages")):
        load_language_module(build(['fr'], adapters=LORA), tmp_path / 'de.pth')
    old = torch.load(tmp_path / 'de.pth', weights_only=True)
    torch.save(dict(old, version=1, base=None), tmp_path / 'v1.pth')
    with pytest.raises(ValueError, match='v1.pth: a language module of format version 1, which '
                       'does not record the shared weights it needs: export it again'):
        load_language_module(build(['de'], adapters=LORA), tmp_path / 'v1.pth')
    torch.save({'state_dict': {}}, tmp_path / 'plain.pth')
    with pytest.raises(ValueError, match='not an xmr language module file'):
        load_language_module(build(['de'], adapters=LORA), tmp_path / 'plain.pth')


def test_a_module_of_other_adapter_settings_than_its_weights_hold_is_refused(tmp_path):
    """PECTVLM's LoRA (alpha 16) loaded into a model of the default alpha: every weight fits,
    and the module computed other features without a word."""
    save_language_module(build(['de'], adapters=dict(LORA, alpha=16)), 'de', tmp_path / 'de.pth')
    with pytest.raises(ValueError, match=r"does not fit this model: adapter_settings: file "
                       r"\[\{'scale': 8\.0, 'type': 'LoRA'\}\] vs model \[\{'scale': 1\.0, "
                       r"'type': 'LoRA'\}\]"):
        load_language_module(build(['de'], adapters=LORA), tmp_path / 'de.pth')
    load_language_module(build(['de'], adapters=dict(LORA, alpha=16)), tmp_path / 'de.pth')


def test_a_module_trained_on_another_target_vocabulary_is_refused_naming_both(tmp_path):
    """Shared weights that happen to match (an own table from the same seed) let it load, and
    the module then read another vocabulary's ids for the same text."""
    def with_corpus(corpus):
        torch.manual_seed(0)
        branch = tiny_branch_cfg(languages=['de'])
        branch['tokenizer']['corpus'] = corpus * 20
        return MODELS.build(dict(type='CrossLingualRetriever', backbone=tiny_backbone_cfg(),
                                 language_branch=branch))

    trained = with_corpus(CORPUS)
    other = with_corpus([caption.upper()[::-1] + ' xyz' for caption in CORPUS])
    sizes = {m.language_branch.tokenizer.vocab_size for m in (trained, other)}
    assert len(sizes) == 1  # the same table shape: only the vocabulary tells them apart
    save_language_module(trained, 'de', tmp_path / 'de.pth')
    digests = [m.language_branch.tokenizer.vocabulary_digest() for m in (trained, other)]
    with pytest.raises(ValueError, match=f"target_vocabulary: file '{digests[0]}' vs model "
                                         f"'{digests[1]}'"):
        load_language_module(other, tmp_path / 'de.pth')
    old = torch.load(tmp_path / 'de.pth', weights_only=True)
    del old['facts']['target_vocabulary']  # as an earlier xmr wrote it
    torch.save(old, tmp_path / 'earlier.pth')
    assert load_language_module(with_corpus(CORPUS), tmp_path / 'earlier.pth') == 'de'


def test_parameter_shares_match_hand_counts():
    model = build(['de', 'fr'], adapters=LORA)
    clip = model.backbone.clip
    visual = sum(p.numel() for p in clip.visual.parameters())
    text = sum(p.numel() for p in clip.parameters()) - visual - clip.logit_scale.numel()
    report = language_parameter_report(model)
    lora = 3 * 2 * (2 * 32 + 32 * 2)  # 3 blocks, q and v, A [2, 32] and B [32, 2]
    assert report['de'].parameters == report['fr'].parameters == lora
    assert report['de'].of_text_encoder == pytest.approx(lora / text)
    assert report['de'].of_backbone == pytest.approx(
        lora / sum(p.numel() for p in model.backbone.parameters()))


def test_a_module_trained_under_another_routine_is_refused_naming_both(tmp_path):
    """PECTVLM's routine 3 queries with English back-translations, routine 1 with the captions
    themselves: the same weights would be read with other texts at test time."""
    def routine_model(routine):
        torch.manual_seed(0)
        return MODELS.build(dict(type='TranslationAlignmentRetriever', routine=routine,
                                 backbone=tiny_backbone_cfg(),
                                 language_branch=clip_branch_cfg(LORA, ['de'])))

    path = save_language_module(routine_model('routine3'), 'de', tmp_path / 'de.pth')
    with pytest.raises(ValueError, match=r"de.pth \(de\) does not fit this model: routine: file "
                                         r"'routine3' vs model 'routine1'"):
        load_language_module(routine_model('routine1'), path)


def test_a_module_of_a_newer_format_asks_for_a_newer_xmr(tmp_path):
    """A newer file was refused as one 'which does not record the shared weights it needs:
    export it again', advice that cannot help; and the facts it may name otherwise were
    compared first."""
    save_language_module(build(['de'], adapters=LORA), 'de', tmp_path / 'de.pth')
    payload = torch.load(tmp_path / 'de.pth', weights_only=True)
    torch.save(dict(payload, version=4, facts=dict(payload['facts'], width=None),
                    xmr_version='0.3.0', xmr_commit='0123abc'), tmp_path / 'v4.pth')
    with pytest.raises(ValueError, match=r'v4\.pth: a language module of format version 4, '
                       r'written by xmr 0\.3\.0 \(commit 0123abc\); read by xmr '
                       rf'{re.escape(xmr.__version__)} \(.*\), which reads version 3: load it '
                       r'with the xmr that wrote it, or update this one'):
        load_language_module(build(['de'], adapters=LORA), tmp_path / 'v4.pth')


def dasd(per_language, module_seed):
    """DASD on the tiny CLIP, de and fr, its trainable weights drawn from module_seed."""
    torch.manual_seed(0)
    cfg = tiny_dasd_cfg()
    cfg['language_branch'] = clip_branch_cfg(dict(type='DynamicAdapter', hidden=4), ['de', 'fr'])
    cfg['disentangler']['per_language'] = per_language
    model = MODELS.build(cfg)
    torch.manual_seed(module_seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith(('language_branch.adapters', 'disentangler')):
                parameter.normal_(std=0.1)
    return model.eval()


def test_a_language_s_own_disentangler_travels_with_its_module(tmp_path):
    """DASD's paper configs build a disentangler per language: de's module loaded into the fr
    slot of a model trained otherwise reproduces de's captions, which it did not when the file
    held de's adapters alone (fr's disentangler conditioned them)."""
    source = dasd(per_language=True, module_seed=1)
    path = save_language_module(source, 'de', tmp_path / 'de.pth')
    state = torch.load(path, weights_only=True)['state_dict']
    own = sum(p.numel() for p in source.disentangler.per_language['de'].parameters())
    assert own > 0 and sum(v.numel() for k, v in state.items()
                           if k.startswith('disentangler.')) == own
    assert sum(v.numel() for v in state.values()) == \
        language_parameter_report(source)['de'].parameters
    receiver = dasd(per_language=True, module_seed=2)
    assert not torch.allclose(encode(receiver, 'fr'), encode(source, 'de'))
    assert load_language_module(receiver, path, lang='fr') == 'fr'
    assert torch.equal(encode(receiver, 'fr'), encode(source, 'de'))
    # A file of format 2 held the adapters alone: refused where a language has its own part.
    payload = torch.load(path, weights_only=True)
    old = {key.partition('.')[2]: value for key, value in payload['state_dict'].items()
           if key.startswith('adapters.')}
    torch.save(dict(payload, version=2, state_dict=old), tmp_path / 'v2.pth')
    with pytest.raises(ValueError, match=r"v2\.pth \(de\): a language module of format version "
                       r"2, which holds no language's own disentangler, the model's "
                       r'SemanticsDisentangler of de among them: export it again'):
        load_language_module(receiver, tmp_path / 'v2.pth')


def test_a_module_file_of_format_2_loads_where_the_languages_share_the_disentangler(tmp_path):
    source = dasd(per_language=False, module_seed=1)
    payload = torch.load(save_language_module(source, 'de', tmp_path / 'de.pth'),
                         weights_only=True)
    assert all(key.startswith('adapters.') for key in payload['state_dict'])
    old = {key.partition('.')[2]: value for key, value in payload['state_dict'].items()}
    torch.save(dict(payload, version=2, state_dict=old), tmp_path / 'v2.pth')
    receiver = dasd(per_language=False, module_seed=1)
    with torch.no_grad():
        for parameter in receiver.language_branch.adapters.sets['de'].parameters():
            parameter.zero_()
    assert load_language_module(receiver, tmp_path / 'v2.pth') == 'de'
    assert torch.equal(encode(receiver, 'de'), encode(source, 'de'))
