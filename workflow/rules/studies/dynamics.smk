# Appendix A.1 (Figures 7-11; transformer_hessian.studies.dynamics): replay the first training steps
# of the Hessian experiment from its init checkpoint and record weights, norms and nine-group Hessian
# blocks (drawn by the registry's fig7_fig11 rule, from studies/dynamics/registry.py).


rule dynamics:
    input:
        checkpoint=expand(rules.train.output.init, exp=HEXP),
        manifest=manifest(experiment(HEXP)["dataset"]),
        saved_init=expand(rules.hessian.output.npz, exp=HEXP, stage="init"),
    output:
        **produced("dynamics", exp=HEXP),  # npz, json
    params:
        data_root=data_root_of,
        spec=settings_file(f"spec_{HEXP}", experiment(HEXP)),
        hessian=settings_file("hessian", config["hessian"]),
        dynamics=settings_file("dynamics", config["dynamics"]),
        device=config["device"],
        tolerance=config["theory"]["tolerance"],
    conda:
        "../../../environment.yml"
    log:
        "logs/dynamics/dynamics.log",
    benchmark:
        "benchmarks/dynamics/dynamics.tsv"
    # dynamics and fig7_fig11 are the longest chain after training: start them first
    priority: 10
    # The train rule's torch threads (REPLAY_THREADS): the replay equals the saved epoch checkpoints
    # bit for bit only with the same number (1 and 2 threads differ by ~1e-7 after 60 steps); like
    # train, one core reserved on the local executor (REPLAY_CORES, common.smk).
    threads: REPLAY_CORES
    resources:
        **REPLAY_RESOURCES,
    shell:
        "transformer-hessian --threads {resources.torch_threads} dynamics --checkpoint {input.checkpoint:q} --spec {params.spec:q} "
        "--hessian {params.hessian:q} --dynamics {params.dynamics:q} --data-root {params.data_root:q} "
        "--device {params.device:q} --saved-init-hessian {input.saved_init:q} --tolerance {params.tolerance:q} "
        "--out-npz {output.npz:q} --out-json {output.json:q} 2> {log:q}"
