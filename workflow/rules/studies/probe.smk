# Landscape probes around w* (Theorem 7 off w*, Taylor model, Assumption 1) and their figures:
# Figure 1 (a: measured L_k, L_{k+1} around w*; b: block diagram), Theorem 7 off w*, Figure 12
# and the Assumption 1 table. Computation: transformer_hessian.studies.probe. The figures' rule
# (probe_figures) comes from the figure registry (studies/probe/registry.py). Its claim rows go
# to CLAIM_ROW_FILES (the claims rule, claims.smk).


rule probe:
    input:
        checkpoint=expand(rules.train.output.final, exp=LEXP),
        init=expand(rules.train.output.init, exp=LEXP),
        manifest=manifest(experiment(LEXP)["dataset"]),
    output:
        **produced("probe", exp=LEXP),  # json, claims
    params:
        experiment=LEXP,
        data_root=data_root_of,
        spec=settings_file(f"spec_{LEXP}", experiment(LEXP)),
        probe=settings_file("probe", config["probe"]),
        device=config["device"],
    conda:
        "../../../environment.yml"
    log:
        f"logs/probe/{LEXP}.log",
    benchmark:
        f"benchmarks/probe/{LEXP}.tsv"
    # probe and probe_figures are the second-longest chain after training: start them early
    priority: 10
    threads: 1
    resources:
        mem_mb=config["resources"]["mem_mb"],
        runtime=config["resources"]["runtime"],
    shell:
        "transformer-hessian --threads {threads} probe --experiment {params.experiment:q} --checkpoint {input.checkpoint:q} "
        "--init-checkpoint {input.init:q} --spec {params.spec:q} --probe {params.probe:q} "
        "--data-root {params.data_root:q} --device {params.device:q} --out {output.json:q} "
        "--claims-out {output.claims:q} 2> {log:q}"


CLAIM_ROW_FILES.append((60, rules.probe.output.claims))
