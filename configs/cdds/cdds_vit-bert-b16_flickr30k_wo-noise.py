# CDDS's Table 3, "w/o noise": cdds_vit-bert-b16_flickr30k.py without the Gaussian perturbations
# of the UNets' bottleneck: one clean copy (K = 1, no noise) goes through the perturbation layer,
# in training as at inference.
_base_ = ['./cdds_vit-bert-b16_flickr30k.py']

model = dict(disentangler=dict(num_perturbations=1, noise_std=0.0))
