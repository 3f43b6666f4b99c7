# DASD Table 4, "no W^z": the dynamic adapters become static bottleneck adapters of the same width
# (W_up ReLU(W_down x) + x, d_u = 32), so nothing is generated per caption and the semantics
# disentangling module, with L_adv and L_sc, goes away. (MLA's static adapter of hidden 256 is
# configs/_base_/models/static-adapter_clip-vit-b32.py.)
model = dict(
    language_branch=dict(adapters=dict(_delete_=True, type='StaticAdapter', hidden=32)),
    disentangler=None)
