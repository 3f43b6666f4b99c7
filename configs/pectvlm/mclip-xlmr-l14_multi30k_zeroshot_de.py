# Zero-shot M-CLIP on Multi30K (PECTVLM's Multi30K zero-shot row): the German test of
# lora-r8_mclip-xlmr-l14_multi30k-full_de.py with M-CLIP reading German itself (no module),
# scored by the mean of R@1 both ways; nothing is trained.
_base_ = ['./lora-r8_mclip-xlmr-l14_multi30k-full_de.py']

model = dict(language_branch=dict(adapters=None, tuned_weights=[]))
paper_figures = None
# Nothing trains or validates (the runner builds neither part).
train_dataloader = train_cfg = optim_wrapper = None
val_dataloader = val_cfg = val_evaluator = None
