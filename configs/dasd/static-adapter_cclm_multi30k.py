# The static-adapter twin of cclm_multi30k.py: MLA's bottleneck adapter (hidden 256) after each
# of CCLM's 6 text layers instead of the dynamic one, no disentangler; same data, phases and steps,
# with L_CL then L_CM alone. Site and initialisation are named: on a post-LN tower such as
# CCLM's the static adapter defaults to mlp.output and zero_init (docs/methods/text_teacher.md),
# and this twin sits where the dynamic adapters do, initialised as MLA's.
_base_ = ['./cclm_multi30k.py']

model = dict(
    language_branch=dict(adapters=dict(_delete_=True, type='StaticAdapter', hidden=256,
                                       sites=['block.output'], zero_init=False)),
    disentangler=None)
