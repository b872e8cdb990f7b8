# Exact dense Hessian of the loss on one fixed training batch w.r.t. [W_Q, W_K, W_V, W_1, W_2],
# for the model of experiment {exp} at {stage} (init or trained).

# Inputs and parameters of every rule that evaluates the model of {exp} at {stage} (hessian,
# theory, bounds): its checkpoint from rule train and its data set's manifest.
STAGE_INPUTS = dict(checkpoint=checkpoint_of, manifest=manifest_of)
STAGE_PARAMS = dict(
    data_root=data_root_of,
    spec=spec_file,
    hessian=settings_file("hessian", config["hessian"]),
    device=config["device"],
)


rule hessian:
    input:
        **STAGE_INPUTS,
    output:
        npz="results/{exp}/hessian/{stage}.npz",
        norms="results/{exp}/hessian/{stage}_norms.json",
    params:
        **STAGE_PARAMS,
    conda:
        "../../environment.yml"
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
