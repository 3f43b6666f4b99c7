"""The retriever base: what a user's retriever gets by declaring its losses, and what it refuses."""
import pytest
import torch
import torch.nn.functional as F
from mmengine.optim import OptimWrapper
from open_clip.transformer import TextTransformer

from tests.conftest import tiny_backbone_cfg, tiny_branch_cfg
from xmr.datasets import SkippedMedia, retrieval_collate
from xmr.models.backbones import OpenCLIPTextTower, VisionLanguageBackbone
from xmr.models.backbones.base import TextTower
from xmr.models.data_preprocessor import RetrievalDataPreprocessor
from xmr.models.language.tokenizers import OpenCLIPTokenizer
from xmr.models.retrievers import base as retriever_base
from xmr.models.retrievers.base import (
    BaseRetriever,
    attach_captions,
    gallery_batch,
    gallery_items,
    unit_rows,
)
from xmr.models.retrievers.translation import TranslationAlignmentRetriever
from xmr.models.translation_data_preprocessor import TranslationDataPreprocessor
from xmr.registry import MODELS
from xmr.utils.cli import UserError


class PairRetriever(BaseRetriever):
    """A user's retriever: the image tower against the frozen text tower, two declared losses."""

    LOSSES = {'contrast': 'InfoNCE of images and captions', 'distance': 'MSE of the pairs'}

    def __init__(self, losses):
        super().__init__()
        # build_backbone binds the preprocessor to its tokenizer and image statistics: a
        # retriever written from the docs' recipe, without its own bind, had none.
        self.backbone = self.build_backbone(tiny_backbone_cfg())
        self.languages = ['en']
        self.build_losses(losses)

    def loss(self, media, source_tokens, **_):
        with self.frozen_tower():
            r_media = self.backbone.encode_media(media)
            r_text = self.backbone.encode_source_text(source_tokens)
        return {f'loss_{name}': self.pair_loss(name, r_text, r_media) for name in self.loss_weights}

    def predict(self, media, media_ids=None, **_):
        return gallery_items(self.backbone.encode_media(media), media_ids)


LOSSES = dict(contrast=dict(type='InfoNCELoss', temperature=0.05),
              distance=dict(type='AlignmentLoss'))


def test_a_retriever_declaring_options_of_its_own_alone_keeps_its_bases_preprocessor():
    """A user's retriever whose ``option_dicts`` names its own option alone (as
    docs/custom_modules.md shows) stopped with a bare KeyError 'data_preprocessor'."""
    class OwnOptions(PairRetriever):
        option_dicts = {'scorer': (dict, ())}

    class Translating(TranslationAlignmentRetriever):
        option_dicts = {'scorer': (dict, ())}

    assert type(OwnOptions(LOSSES).data_preprocessor) is RetrievalDataPreprocessor
    assert Translating.preprocessor_type() is TranslationDataPreprocessor


def test_a_users_retriever_checks_languages_against_those_it_reads():
    """xmr.apis call ``check_languages`` on any retriever; a user's that declares only its
    ``languages`` stopped with AttributeError there."""
    model = PairRetriever(LOSSES)
    model.check_languages(['en', 'en'], 'query')
    with pytest.raises(ValueError, match=r"^query: the model does not read \['de', 'ja'\]; "
                                         r"it reads \['en'\]$"):
        model.check_languages(['en', 'de', 'ja'], 'query')


def test_a_retriever_without_its_computation_cannot_be_built():
    class NoPredict(BaseRetriever):
        def loss(self, **batch):
            return {}

    with pytest.raises(TypeError, match='abstract method.*predict'):
        NoPredict()


def test_declared_losses_phases_and_modes(monkeypatch):
    model = PairRetriever(LOSSES)
    assert model.loss_names() == {'contrast', 'distance'}
    model.set_phase('align', dict(contrast=2.0, distance=0.0, disentangler=1.0))
    assert (model.phase, model.loss_weights) == ('align', {'contrast': 2.0})
    with pytest.raises(KeyError, match=r"phase p: unknown loss weights \['cm'\]; this model "
                                       r"computes \['contrast', 'distance'\]"):
        model.check_phase('p', dict(cm=1.0))
    # The disentangler's scale alone, on a model without one, trains nothing: refused, where
    # the loop would otherwise fail at the phase's first step, after the phases before it.
    with pytest.raises(ValueError, match=r"phase p: loss_weights=\{'contrast': 0, "
                                         r"'disentangler': 1.0\} weigh no loss this model "
                                         r"computes .*give one of \['contrast', 'distance'\]"):
        model.check_phase('p', dict(contrast=0, disentangler=1.0))
    with pytest.raises(KeyError, match=r"PairRetriever: unknown losses \['cl'\]; it computes"):
        PairRetriever(dict(cl=dict(type='AlignmentLoss')))
    with pytest.raises(ValueError, match="unknown forward mode 'train'"):
        model(mode='train')

    gathered = []
    monkeypatch.setattr(retriever_base, 'gather_with_grad',
                        lambda a, b: gathered.append(a.shape) or (a, b))
    data = model.data_preprocessor(dict(media=torch.randint(0, 256, (3, 3, 32, 32),
                                                            dtype=torch.uint8),
                                        source_text=['a', 'b c', 'd'], lang=['en'] * 3), True)
    model.set_phase('both', dict(contrast=2.0, distance=0.5))
    losses = model(mode='loss', **data)
    assert gathered == [torch.Size([3, 32])]  # the contrastive loss alone sees the global batch
    r_media = model.backbone.encode_media(data['media'])
    r_text = model.backbone.encode_source_text(data['source_tokens'])
    torch.testing.assert_close(losses['loss_distance'], 0.5 * ((r_text - r_media) ** 2).mean())
    a, b = F.normalize(r_text, dim=-1), F.normalize(r_media, dim=-1)
    logits, labels = 20 * a @ b.t(), torch.arange(3)
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    torch.testing.assert_close(losses['loss_contrast'], 2.0 * expected)
    assert not r_text.requires_grad  # frozen tower: no graph through it


def test_a_phase_training_part_of_the_backbone_keeps_its_gradients():
    """A phase that trains one tower (its ``trainable`` naming it) runs the backbone with
    autograd: only a backbone frozen whole runs without."""
    model = PairRetriever(LOSSES)
    model.set_phase('text', dict(distance=1.0))
    data = model.data_preprocessor(dict(media=torch.randint(0, 256, (2, 3, 32, 32),
                                                            dtype=torch.uint8),
                                        source_text=['a', 'b c'], lang=['en'] * 2), True)
    model.backbone.requires_grad_(False)
    assert model(mode='loss', **data)['loss_distance'].grad_fn is None
    model.backbone.text_tower.requires_grad_(True)
    model(mode='loss', **data)['loss_distance'].backward()
    trained = [p for p in model.backbone.text_tower.parameters() if p.grad is not None]
    assert trained and any(p.grad.abs().sum() > 0 for p in trained)


def test_checkpoint_facts_are_the_extra_state():
    model = PairRetriever(LOSSES)
    state = model.state_dict()
    assert state['_extra_state'].dtype == torch.uint8
    other = PairRetriever(LOSSES)
    other.languages = ['en', 'sw']
    with pytest.raises(ValueError, match=r"languages: checkpoint \['en'\] vs config"):
        other.load_state_dict(state)


def test_gallery_items_and_their_captions_by_hand():
    items = gallery_items(torch.tensor([[3.0, 4.0], [0.0, 2.0]]), ['x', 'y'], indices=[7, 9])
    assert [(i['media_id'], i['index']) for i in items] == [('x', 7), ('y', 9)]
    torch.testing.assert_close(items[0]['media_embedding'], torch.tensor([0.6, 0.8]))
    attach_captions(items, 'sw', torch.tensor([[0.0, 5.0], [1.0, 0.0], [2.0, 0.0]]),
                    owner=torch.tensor([1, 0, 1]))
    torch.testing.assert_close(items[0]['caption_embeddings']['sw'], torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(items[1]['caption_embeddings']['sw'],
                               torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    assert gallery_items(torch.ones(1, 2))[0]['media_id'] == '0'
    # An item without captions in a language gets none; an owner past the batch is refused.
    attach_captions(items, 'de', torch.tensor([[0.0, 3.0]]), owner=torch.tensor([1]))
    assert items[0]['caption_embeddings']['de'].shape == (0, 2)
    torch.testing.assert_close(items[1]['caption_embeddings']['de'], torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match='caption owners name item 2 of a batch of 2 items'):
        attach_captions(items, 'fr', torch.ones(2, 2), owner=torch.tensor([0, 2]))


def test_a_gallery_batch_equals_its_items_and_captions_attached_one_by_one():
    generator = torch.Generator().manual_seed(0)
    media = torch.randn(3, 4, generator=generator)
    en, de = torch.randn(5, 4, generator=generator), torch.randn(2, 4, generator=generator)
    owners = dict(en=torch.tensor([2, 0, 1, 0, 2]), de=torch.tensor([1, 1]))
    expected = gallery_items(media, ['a', 'b', 'c'], indices=[4, 5, 6])
    for lang, rows in (('en', en), ('de', de)):
        attach_captions(expected, lang, rows, owners[lang])
    got = gallery_batch(unit_rows(media), dict(en=(unit_rows(en), owners['en']),
                                               de=(unit_rows(de), owners['de'])),
                        ['a', 'b', 'c'], indices=[4, 5, 6])
    assert [list(item) for item in got] == [list(item) for item in expected]
    for mine, theirs in zip(got, expected):
        assert mine['index'] == theirs['index'] and mine['media_id'] == theirs['media_id']
        assert torch.equal(mine['media_embedding'], theirs['media_embedding'])
        for lang in ('en', 'de'):
            assert torch.equal(mine['caption_embeddings'][lang],
                               theirs['caption_embeddings'][lang])
    # The items hold their media rows alone, not the captions' rows copied with them.
    assert got[0]['media_embedding'].untyped_storage().nbytes() == 3 * 4 * 4
    # Text only: the items are named by their ids.
    text_only = gallery_batch(None, dict(de=(unit_rows(de), owners['de'])), ['a', 'b'])
    assert [item['caption_embeddings']['de'].shape[0] for item in text_only] == [0, 2]
    assert 'media_embedding' not in text_only[0]


def test_a_training_batch_whose_every_item_was_skipped_names_its_files(tiny_retriever):
    # on_corrupt='skip' with unreadable files alone in a batch: no step can be taken, and the
    # losses' own complaint ('need source_text in every batch') would blame the config.
    batch = retrieval_collate([SkippedMedia(0, '/v/a.jpg', 'not a decodable image'),
                               SkippedMedia(1, '/v/b.jpg', 'file not found')])
    with pytest.raises(ValueError, match=r"every item of a training batch was skipped as "
                       r"unreadable \(on_corrupt='skip'\): /v/a.jpg, /v/b.jpg; "):
        tiny_retriever.train_step(batch, OptimWrapper(torch.optim.SGD(
            tiny_retriever.parameters(), lr=0.1)))


def test_the_translation_model_builds_only_its_own_losses():
    model = MODELS.build(dict(type='TranslationAlignmentRetriever', routine='routine1',
                              backbone=tiny_backbone_cfg(),
                              language_branch=tiny_branch_cfg()))
    assert set(model.losses) == {'cm', 'align'}
    assert not [name for name in model.state_dict() if name.startswith('losses.')]
    with pytest.raises(TypeError, match='TranslationDataPreprocessor.*got '
                                        'RetrievalDataPreprocessor'):
        MODELS.build(dict(type='TranslationAlignmentRetriever', routine='routine1',
                          backbone=tiny_backbone_cfg(), language_branch=tiny_branch_cfg(),
                          data_preprocessor=dict(type='RetrievalDataPreprocessor')))


class UncheckedBackbone(VisionLanguageBackbone):
    """A user's backbone that does not check its tokenizer itself: CLIP's 77-token tokenizer
    before a text tower of 12 positions."""

    image_mean = image_std = (0.5, 0.5, 0.5)
    image_size = (32, 32)

    def __init__(self) -> None:
        super().__init__()
        self.text_tower = OpenCLIPTextTower(TextTransformer(
            context_length=12, vocab_size=49408, width=32, heads=2, layers=1, output_dim=32))
        self.tokenizer = OpenCLIPTokenizer(max_length=77)
        self.embed_dim = 32

    def encode_image(self, images):
        return images.flatten(1)[:, :32]


@pytest.mark.parametrize('retriever', ['CrossLingualRetriever', 'DualEncoderRetriever'])
def test_a_source_tokenizer_that_does_not_fit_a_users_tower_is_refused_when_built(retriever):
    """Not at the first caption longer than the tower's context, mid-run."""
    with pytest.raises(ValueError, match='^tokenizer max_length 77 exceeds the text context '
                                         'length 12 of UncheckedBackbone$'):
        MODELS.build(dict(type=retriever, backbone=dict(type=UncheckedBackbone)))


def test_a_backbone_that_is_not_a_text_backbone_is_refused_by_name():
    with pytest.raises(TypeError, match='^CrossLingualRetriever: backbone Linear is not a '
                                        'TextBackbone'):
        MODELS.build(dict(type='CrossLingualRetriever',
                          backbone=dict(type=torch.nn.Linear, in_features=2, out_features=2)))


class ShortTower(TextTower):
    """A user's tower whose class forgot three of what TextTower lists: causal, pooling and
    num_heads, unless ``pooling`` is given (never run: the build refuses it first)."""

    embed_tokens = add_positions = run_block = head = None
    width = embed_dim = 32
    num_blocks, context_length, vocab_size = 1, 40, 49408

    def __init__(self, pooling: str | None = None) -> None:
        super().__init__()
        if pooling is not None:
            self.causal, self.pooling, self.num_heads = True, pooling, 2


class ShortBackbone(VisionLanguageBackbone):
    """A user's backbone that sets no image_mean and no tokenizer, its tower as ``tower`` says."""

    image_size = (32, 32)
    image_std = (0.5, 0.5, 0.5)

    def __init__(self, tower: str = 'whole', pooling: str | None = None) -> None:
        super().__init__()
        self.text_tower = ShortTower(pooling) if tower == 'short' else OpenCLIPTextTower(
            TextTransformer(context_length=40, vocab_size=49408, width=32, heads=2, layers=1,
                            output_dim=32))
        self.embed_dim = 32
        if tower != 'no_tokenizer':
            self.tokenizer = OpenCLIPTokenizer(max_length=12)
            self.image_mean = (0.5, 0.5, 0.5)

    def encode_image(self, images):
        return images.flatten(1)[:, :32]


@pytest.mark.parametrize('options, message', [
    (dict(tower='no_tokenizer'), "^CrossLingualRetriever: ShortBackbone sets no tokenizer, "
                                 "image_mean: set them in its class or __init__, as every "
                                 "VisionLanguageBackbone does \\(docs/custom_modules.md, 'The "
                                 "interface of a backbone'\\)$"),
    (dict(tower='short'), '^the text tower of ShortBackbone: ShortTower sets no causal, pooling, '
                          'num_heads: set them in its class or __init__, as every TextTower'),
    (dict(tower='short', pooling='avg'), "^the text tower of ShortBackbone: ShortTower pools by "
                                         "'avg': set its pooling to one of eos, cls, last, mean$"),
])
def test_a_users_backbone_short_of_its_interface_is_refused_by_name_when_built(options, message):
    """Not as an AttributeError where a check or a step first reads the attribute."""
    with pytest.raises(UserError, match=message):
        MODELS.build(dict(type='CrossLingualRetriever', language_branch=tiny_branch_cfg(),
                          backbone=dict(type=ShortBackbone, **options)))
