# Figure 6 protocol: per-sample losses at w*, |L_{k+1} - L_k| over random orderings, slope fit.


rule landscape:
    input:
        checkpoint=rules.train.output.final,
        manifest=manifest_of,
    output:
        json="results/{exp}/landscape/landscape.json",
    params:
        data_root=data_root_of,
        spec=spec_file,
        landscape=settings_file("landscape", config["landscape"]),
        device=config["device"],
    conda:
        "../../environment.yml"
    log:
        "logs/landscape/{exp}.log",
    benchmark:
        "benchmarks/landscape/{exp}.tsv"
    threads: 1
    resources:
        **MODEL_RESOURCES,
    shell:
        "transformer-hessian --threads {threads} landscape --checkpoint {input.checkpoint:q} --spec {params.spec:q} "
        "--landscape {params.landscape:q} --data-root {params.data_root:q} --device {params.device:q} --out {output:q} 2> {log:q}"
