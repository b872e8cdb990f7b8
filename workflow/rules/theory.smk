# Checks the Hessian the hessian rule saved against curvlinops Hessian-vector products on random
# probe vectors (theory.probes per group) on the same batch; fails when any relative error exceeds
# theory.tolerance, which stops the Hessian figures that depend on it.


rule theory:
    input:
        **STAGE_INPUTS,
        npz=rules.hessian.output.npz,
        norms=rules.hessian.output.norms,
    output:
        json="results/{exp}/theory/{stage}.json",
    params:
        **STAGE_PARAMS,
        tolerance=config["theory"]["tolerance"],
        probes=config["theory"]["probes"],
    conda:
        "../../environment.yml"
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
