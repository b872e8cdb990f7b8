# Train one experiment; resumes from its last epoch checkpoint after an interruption.


rule train:
    input:
        manifest=manifest_of,
    output:
        **produced("train"),  # init, final (checkpoints), metrics
    params:
        data_root=data_root_of,
        spec=spec_file,
        out=lambda w, output: os.path.dirname(output.metrics),
        device=config["device"],
    conda:
        "../../environment.yml"
    log:
        "logs/train/{exp}.log",
    benchmark:
        "benchmarks/train/{exp}.tsv"
    # torch's intra-op threads (capped by --cores); the dynamics rule replays with the same number.
    # (One thread would leave a core free on 2 cores, but changes the trained weights: on the
    # embedded default the fig6_slope verdict flips.)
    threads: 4
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} train --experiment {wildcards.exp:q} --spec {params.spec:q} "
        "--data-root {params.data_root:q} --out {params.out:q} --device {params.device:q} 2> {log:q}"
