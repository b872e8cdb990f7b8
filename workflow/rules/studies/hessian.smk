# The Hessian study (Figures 3-5): the exact dense Hessian of the loss on one fixed training batch
# w.r.t. [W_Q, W_K, W_V, W_1, W_2] for the model of experiment {exp} at {stage} (init or trained),
# and its check against curvlinops Hessian-vector products (rule theory), which gates the Hessian
# figures. Computation: transformer_hessian.studies.hessian (steps) on transformer_hessian.core.hessian
# and transformer_hessian.core.checks; the figure rules come from the registry (studies/hessian/registry.py).
# The Snakefile includes this file before the other rule files of the studies: bounds, dynamics,
# the tables, the claims and the summary read its outputs (rules.hessian, rules.theory).


rule hessian:
    input:
        **STAGE_INPUTS,
    output:
        **produced("hessian"),  # npz, norms
    params:
        **STAGE_PARAMS,
    conda:
        "../../../environment.yml"
    log:
        "logs/hessian/{exp}_{stage}.log",
    benchmark:
        "benchmarks/hessian/{exp}_{stage}.tsv"
    threads: 1
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} hessian --checkpoint {input.checkpoint:q} --stage {wildcards.stage:q} "
        "--spec {params.spec:q} --hessian {params.hessian:q} --data-root {params.data_root:q} --device {params.device:q} "
        "--out-npz {output.npz:q} --out-norms {output.norms:q} 2> {log:q}"


# Checks the Hessian the hessian rule saved against curvlinops Hessian-vector products on random
# probe vectors (theory.probes per group) on the same batch; fails when any relative error exceeds
# theory.tolerance, which stops the Hessian figures that depend on it.


rule theory:
    input:
        **STAGE_INPUTS,
        npz=rules.hessian.output.npz,
        norms=rules.hessian.output.norms,
    output:
        **produced("theory"),  # json
    params:
        **STAGE_PARAMS,
        tolerance=config["theory"]["tolerance"],
        probes=config["theory"]["probes"],
    conda:
        "../../../environment.yml"
    log:
        "logs/theory/{exp}_{stage}.log",
    benchmark:
        "benchmarks/theory/{exp}_{stage}.tsv"
    threads: 1
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} theory --checkpoint {input.checkpoint:q} --stage {wildcards.stage:q} "
        "--spec {params.spec:q} --hessian {params.hessian:q} --data-root {params.data_root:q} --device {params.device:q} "
        "--tolerance {params.tolerance:q} --hessian-npz {input.npz:q} --norms {input.norms:q} --probes {params.probes:q} "
        "--out {output:q} 2> {log:q}"
