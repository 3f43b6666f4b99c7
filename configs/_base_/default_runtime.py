default_scope = 'xmr'

env_cfg = dict(
    cudnn_benchmark=False,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='nccl'),
)
randomness = dict(seed=0, deterministic=False)

default_hooks = dict(
    runtime_info=dict(type='RuntimeInfoHook'),
    timer=dict(type='IterTimerHook'),
    # An iteration-based run logs each validation at its iteration, not at epoch 0.
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', interval=1000, by_epoch=False, max_keep_ckpts=2,
                    save_best='mAR', rule='greater'),
    sampler_seed=dict(type='DistSamplerSeedHook'),
)
custom_hooks = [dict(type='WorkDirLockHook'), dict(type='RNGStateHook'),
                dict(type='WeightsOnlyCheckpointHook'), dict(type='PhaseReportHook'),
                dict(type='PreemptionHook'), dict(type='CorruptMediaHook')]

log_processor = dict(type='LogProcessor', window_size=50, by_epoch=False)
log_level = 'INFO'
load_from = None
resume = False
