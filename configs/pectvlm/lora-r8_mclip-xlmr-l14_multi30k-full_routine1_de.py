# PECTVLM, Multi30K full data, German, LoRA r = 8 with routine 1: + lambda * MSE(German caption,
# its original English caption), both through the German module.
_base_ = ['./lora-r8_mclip-xlmr-l14_multi30k-full_de.py']

model = dict(routine='routine1')
train_cfg = dict(phases=[dict(_base_.phase, loss_weights=_base_.align_loss_weights)])
