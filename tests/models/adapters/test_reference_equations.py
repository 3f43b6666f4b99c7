"""PEFT modules against references written from their papers' equations, run by open_clip's own
modules (hooks on its residual block, its own transformer on prompted embeddings, Hugging Face
encoders with LoRA merged into their weights)."""
import copy

import pytest
import torch

from tests.models.adapters.peft_helpers import CAPTIONS, build_clip_branch, lora_delta
from xmr.models.adapters import AdapterContext, AdapterPlacement, LoRA
from xmr.registry import MODELS


def padded_ids(clip, tokens, length=None):
    """The branch's token ids padded with zeros to ``length`` (default: the context)."""
    length = length or clip.positional_embedding.shape[0]
    ids = torch.zeros(tokens['input_ids'].shape[0], length, dtype=torch.long)
    ids[:, :tokens['input_ids'].shape[1]] = tokens['input_ids']
    return ids


def test_houlsby_sits_after_each_sublayer_before_its_residual_add_in_open_clips_block():
    """Houlsby et al. (Fig. 2): ``x + A(ls_1(attn(ln_1 x)))`` then ``x + A(ls_2(mlp(ln_2 x)))``;
    the reference hooks the adapters onto open_clip's own ``ls_1`` / ``ls_2`` outputs."""
    backbone, branch = build_clip_branch(dict(type='HoulsbyAdapter', hidden=6),
                                         languages=['de'])
    placed = branch.adapters.sets['de']
    torch.manual_seed(2)
    with torch.no_grad():
        for parameter in placed.parameters():
            parameter.normal_(std=0.3)
    tokens = branch.tokenize(CAPTIONS)
    adapted = branch(tokens, ['de'] * len(CAPTIONS))

    clip = copy.deepcopy(backbone.clip)
    ctx = AdapterContext(lang='de')
    for index, block in enumerate(clip.transformer.resblocks):
        for module, site in ((block.ls_1, 'attn_output'), (block.ls_2, 'mlp_output')):
            adapter = placed[f'{index}:{site}']
            module.register_forward_hook(
                lambda _m, _i, out, adapter=adapter: adapter(out, ctx))
    expected = clip.encode_text(padded_ids(clip, tokens))
    torch.testing.assert_close(adapted, expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(adapted, backbone.clip.encode_text(padded_ids(clip, tokens)),
                              atol=1e-3)


def test_soft_prompt_equals_open_clips_transformer_on_the_prompted_embeddings():
    """Prompt tuning (Lester et al.) as PECTVLM inserts it: ``[sot; P; caption]`` embedded,
    positions over the whole, the causal mask, pooled at the EOT, which moved by ``N``."""
    backbone, branch = build_clip_branch(dict(type='SoftPrompt', num_tokens=3, init_std=0.5),
                                         languages=['de'])
    prompt = branch.adapters.sets['de']['-1:input'].prompt
    tokens = branch.tokenize(CAPTIONS)
    adapted = branch(tokens, ['de'] * len(CAPTIONS))

    clip = backbone.clip
    context = clip.positional_embedding.shape[0]
    ids = padded_ids(clip, tokens, context - 3)
    with torch.no_grad():
        x = clip.token_embedding(ids)
        x = torch.cat([x[:, :1], prompt.expand(len(CAPTIONS), -1, -1), x[:, 1:]], dim=1)
        x = clip.transformer(x + clip.positional_embedding, attn_mask=clip.attn_mask)
        x = clip.ln_final(x)
        pooled = x[torch.arange(len(CAPTIONS)), ids.argmax(-1) + 3]
        expected = pooled @ clip.text_projection
    torch.testing.assert_close(adapted, expected, atol=1e-5, rtol=1e-4)


def _hf_projections(tower, index: int) -> dict:
    """LoRA target -> the Hugging Face ``nn.Linear`` it updates in block ``index``."""
    name = type(tower).__name__
    if 'T5' in name:
        block = tower.blocks[index]
        attention, dense = block.layer[0].SelfAttention, block.layer[1].DenseReluDense
        return dict(q=attention.q, k=attention.k, v=attention.v, out=attention.o,
                    fc=getattr(dense, 'wi_1', None) or dense.wi, proj=dense.wo)
    layer = tower.layers[index]
    if 'M2M100' in name:
        attention = layer.self_attn
        return dict(q=attention.q_proj, k=attention.k_proj, v=attention.v_proj,
                    out=attention.out_proj, fc=layer.fc1, proj=layer.fc2)
    attention = layer.attention.self
    return dict(q=attention.query, k=attention.key, v=attention.value,
                out=layer.attention.output.dense, fc=layer.intermediate.dense,
                proj=layer.output.dense)


@pytest.mark.parametrize('name', ['xlmr_mean_pooler_mlp', 'mt5_mean_pooler_mlp',
                                  'nllb_clip_cls_pooler_linear'])
def test_lora_equals_merged_weights_in_open_clips_hugging_face_encoders(name, tmp_path):
    """``W += (α/r) B A`` in each Hugging Face projection (separate q, k, v as in peft), run by
    open_clip's ``HFTextEncoder``: XLM-R (post-LN), mT5 (gated FFN: ``fc`` is ``wi_1``), NLLB."""
    from tests.models.backbones.test_open_clip_families import (
        _branch_tokenizer,
        _build,
        _open_clip_ids,
    )

    backbone = _build(name, tmp_path)
    branch = MODELS.build(
        dict(type='TargetLanguageBranch', languages=['de'],
             tokenizer=_branch_tokenizer(name, tmp_path),
             embedding=dict(type='TowerTokenEmbedding'),
             adapters=dict(type='LoRA', r=2, alpha=3, targets=['q', 'k', 'v', 'out', 'fc',
                                                                  'proj'])),
        default_args=dict(tower=backbone.text_tower)).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for param_name, parameter in branch.adapters.named_parameters():
            if 'lora_B' in param_name:
                parameter.normal_(std=0.3)
    texts = ['ein roter Kreis', 'zwei blaue Quadrate', 'drei Dreiecke']
    tokens = branch.tokenize(texts, ['de'] * 3)
    merged = copy.deepcopy(backbone)
    with torch.no_grad():
        adapted = branch(tokens, ['de'] * 3)
        frozen = merged.clip.encode_text(_open_clip_ids(merged, tokens), normalize=False)
        for key, lora in branch.adapters.sets['de'].items():
            projections = _hf_projections(merged.text_tower, int(key.split(':')[0]))
            for target in lora.targets:
                projections[target].weight += lora_delta(lora, target)
        expected = merged.clip.encode_text(_open_clip_ids(merged, tokens), normalize=False)
    torch.testing.assert_close(adapted, expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(adapted, frozen, atol=1e-3)


def test_lora_a_starts_as_peft_kaiming_uniform_and_b_at_zero():
    """peft and loralib: ``kaiming_uniform_(A, a=√5)``, i.e. U(±1/√d_in) on ``A`` ``[r, d_in]``
    (nn.Linear's own), and ``B = 0``: the bound is the input width's, not the rank's."""
    torch.manual_seed(0)
    lora = LoRA(AdapterPlacement(256, 'mlp.fc', in_features=256, out_features=1024), r=64,
                targets=['fc'])
    a, b = lora.lora_A['fc'], lora.lora_B['fc']
    assert a.shape == (64, 256) and b.shape == (1024, 64)
    bound = 1 / 256 ** 0.5
    assert a.abs().max().item() <= bound and a.abs().max().item() > 0.99 * bound
    assert a.std().item() == pytest.approx(bound / 3 ** 0.5, rel=0.05)
    assert torch.count_nonzero(b) == 0


def test_compacter_holds_4l_k_plus_d_plus_n_cubed_weights():
    """Compacter with the shared rule and rank-1 factors (Eq. 4-5): each PHM layer holds
    ``n (d/n + k/n) = k + d`` factor weights, two an adapter, two adapters a block, the ``n³``
    rule once: ``4L(k + d) + n³``, plus the biases (k + d an adapter); and
    docs/methods/pectvlm.md's 3,392 a pair at width 1024 with OpenDelta's rule per layer."""
    from xmr.models.adapters.language_adapters import LanguageAdapters

    d, k, n, layers = 1024, 64, 4, 2
    shared = LanguageAdapters(['de'], dict(type='CompacterAdapter', share_rule=True), d, layers)
    weights = biases = 0
    for name, parameter in shared.named_parameters():
        if name.endswith('.bias'):
            biases += parameter.numel()
        else:
            weights += parameter.numel()
    assert weights == 4 * layers * (k + d) + n ** 3
    assert biases == 2 * layers * (k + d)
    own = LanguageAdapters(['de'], dict(type='CompacterAdapter'), d, 1)
    assert sum(p.numel() for p in own.parameters()) == 2 * 3392
