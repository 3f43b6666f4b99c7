"""PEFT modules against references written from their papers' equations, run by open_clip's own
modules (hooks on its residual block, its own transformer on prompted embeddings)."""
import copy

import torch

from tests.models.adapters.peft_helpers import CAPTIONS, build_clip_branch
from xmr.models.adapters import AdapterContext


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
