# Exact dense Hessian of the loss on one fixed training batch w.r.t. [W_Q, W_K, W_V, W_1, W_2].


rule hessian:
    input:
        checkpoint=lambda w: f"results/{HEXP}/checkpoints/{CHECKPOINT[w.stage]}",
        manifest=f"{DATA_ROOT}/{config['experiments'][HEXP]['dataset']}/manifest.json",
    output:
        npz="results/{exp}/hessian/{stage}.npz",
        norms="results/{exp}/hessian/{stage}_norms.json",
    params:
        data_root=data_root_of,
        spec=lambda w: json.dumps(config["experiments"][w.exp]),
        hessian=json.dumps(config["hessian"]),
        device=config["device"],
    conda:
        "../../environment.yml"
    log:
        "logs/hessian/{exp}_{stage}.log",
    benchmark:
        "benchmarks/hessian/{exp}_{stage}.tsv"
    threads: 1
    resources:
        cpus_per_task=lambda wildcards, threads: threads,
        gpu=config["resources"]["gpu"],
        mem_mb=config["resources"]["mem_mb"],
        runtime=config["resources"]["runtime"],
    shell:
        "transformer-hessian --threads {threads} hessian --checkpoint {input.checkpoint:q} --stage {wildcards.stage:q} "
        "--spec {params.spec:q} --hessian {params.hessian:q} --data-root {params.data_root:q} --device {params.device:q} "
        "--out-npz {output.npz:q} --out-norms {output.norms:q} 2> {log:q}"
