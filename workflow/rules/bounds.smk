# Bound evaluation: measured Hessian norms vs the project's proven bounds and the paper's
# Theorems 1 and 6 (with Lemma 4), per stage; then the table and the figure.


rule bounds:
    input:
        checkpoint=lambda w: f"results/{HEXP}/checkpoints/{CHECKPOINT[w.stage]}",
        manifest=f"{DATA_ROOT}/{config['experiments'][HEXP]['dataset']}/manifest.json",
        norms=f"{HDIR}/{{stage}}_norms.json",
        npz=f"{HDIR}/{{stage}}.npz",
    output:
        "results/{exp}/bounds/{stage}.json",
    params:
        data_root=data_root_of,
        spec=lambda w: json.dumps(config["experiments"][w.exp]),
        hessian=json.dumps(config["hessian"]),
        bounds=json.dumps(config["bounds"]),
        device=config["device"],
    conda:
        "../../environment.yml"
    log:
        "logs/bounds/{exp}_{stage}.log",
    benchmark:
        "benchmarks/bounds/{exp}_{stage}.tsv"
    threads: 1
    resources:
        gpu=config["resources"]["gpu"],
        mem_mb=config["resources"]["mem_mb"],
        runtime=config["resources"]["runtime"],
    shell:
        "transformer-hessian --threads {threads} bounds evaluate --checkpoint {input.checkpoint:q} "
        "--stage {wildcards.stage:q} --spec {params.spec:q} --hessian {params.hessian:q} --bounds {params.bounds:q} "
        "--data-root {params.data_root:q} --norms {input.norms:q} --hessian-npz {input.npz:q} "
        "--device {params.device:q} --out {output:q} 2> {log:q}"


rule bounds_table:
    input:
        expand("results/{exp}/bounds/{stage}.json", exp=HEXP, stage=STAGES),
    output:
        tables=expand("paper/tables/bounds.{ext}", ext=["csv", "tex", "md"]),
        claims=f"results/{HEXP}/bounds/claim_rows.json",
    conda:
        "../../environment.yml"
    log:
        "logs/bounds/table.log",
    benchmark:
        "benchmarks/bounds/table.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "transformer-hessian bounds table --results {input:q} --out-dir paper/tables "
        "--claims-out {output.claims:q} 2> {log:q}"
