# DASD Table 11: dynamic adapters with bottleneck d_u = 64 (W^z is 64 x 64).
model = dict(language_branch=dict(adapters=dict(hidden=64)),
             disentangler=dict(generator=dict(d_u=64)))
