# DASD Table 11: dynamic adapters with bottleneck d_u = 16 (W^z is 16 x 16).
model = dict(language_branch=dict(adapters=dict(hidden=16)),
             disentangler=dict(generator=dict(d_u=16)))
