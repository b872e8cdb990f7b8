# Figure 6 protocol: per-sample losses at w*, |L_{k+1} - L_k| over random orderings, slope fit.
# Computation: transformer_hessian.studies.landscape; Figure 6's rule comes from the figure registry
# (its studies/landscape/registry.py). Its claim rows (Figure 6's slope, Theorem 7 at w*) go to
# CLAIM_ROW_FILES, the result itself is its summary section (SUMMARY_SECTIONS).


rule landscape:
    input:
        checkpoint=rules.train.output.final,
        manifest=manifest_of,
        metrics=rules.train.output.metrics,
    output:
        **produced("landscape"),  # json
    params:
        data_root=data_root_of,
        spec=spec_file,
        landscape=settings_file("landscape", config["landscape"]),
        device=config["device"],
    conda:
        "../../../environment.yml"
    log:
        "logs/landscape/{exp}.log",
    benchmark:
        "benchmarks/landscape/{exp}.tsv"
    # scheduling (train.smk): before the short figure jobs, so that its figure does not end the run
    priority: 5
    threads: 1
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} landscape --checkpoint {input.checkpoint:q} --spec {params.spec:q} "
        "--landscape {params.landscape:q} --data-root {params.data_root:q} --device {params.device:q} --out {output.json:q} "
        "--metrics {input.metrics:q} --claims-out {output.claims:q} 2> {log:q}"


CLAIM_ROW_FILES.append((30, expand(rules.landscape.output.claims, exp=LEXP)[0]))
SUMMARY_SECTIONS.append(("landscape", expand(rules.landscape.output.json, exp=LEXP)[0]))
